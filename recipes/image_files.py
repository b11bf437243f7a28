"""New images for a trained model (``zoo predict``), shared by the image domains: a folder (flat, or class
subfolders named as the run's classes) or one file, decoded as training decoded its own folders
(``image_decoding.decode_image``: centre square at the model's size) with the model's channel count. Also the timm
folder a timm backbone exports to (``zoo export --format timm``)."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes import image_tables
from recipe_zoo.recipes.backbones import OWN_MODELS
from recipe_zoo.recipes.image_decoding import IMAGE_SUFFIXES, decode_image


def list_images(data: str, classes: list[str] | None = None, log=print) -> tuple[list[Path], list[int] | None, Path]:
    """(files, labels or None, root): class subfolders named as ``classes`` give labels (the metric can be
    computed); any other folder is read flat, recursively. Non-image files are counted, never read."""
    root = Path(data)
    if not root.exists():
        raise ZooError(f"data={data}: no such file or folder")
    table = image_tables.find_table(root, image_tables.LabelsTable())
    if table is not None:  # a labels table: its files, scored where its labels are the run's classes
        listing = image_tables.read_listing(table, image_tables.LabelsTable(), log, training=False)
        known = bool(classes) and set(listing.classes) <= set(classes)
        if known:
            log(f"{table}: {len(listing.paths)} images with labels: scored against them")
        else:
            log(f"{table}: {len(listing.paths)} images; its labels are not all the run's classes, so not scored")
        labels = [classes.index(listing.classes[k]) for k in listing.labels] if known else None
        return listing.paths, labels, table.parent
    if root.is_file():
        if root.suffix.lower() not in IMAGE_SUFFIXES:
            raise ZooError(f"{root}: not an image file ({', '.join(sorted(IMAGE_SUFFIXES))})")
        return [root], None, root.parent
    files = sorted(p for p in root.rglob("*") if p.is_file())
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    if len(images) < len(files):
        log(f"{root}: skipped {len(files) - len(images)} non-image files")
    if not images:
        raise ZooError(f"{root}: no images found")
    subfolders = {p.relative_to(root).parts[0] for p in images if len(p.relative_to(root).parts) > 1}
    labels = None
    nested = all(len(p.relative_to(root).parts) > 1 for p in images)
    if classes and subfolders and subfolders <= set(classes) and nested:
        labels = [classes.index(p.relative_to(root).parts[0]) for p in images]
        log(f"{root}: {len(images)} images in class folders: scored against their labels")
    return images, labels, root


def read_images(paths: list[Path], size: int, channels: int, log=print, progress=None) -> torch.Tensor:
    """(N, channels, size, size) uint8. A greyscale file for a colour model is repeated to three channels (as
    training did); a colour file for a greyscale model is an error naming it. ``progress(done, total, what)``."""
    out = []
    grey = 0
    for i, path in enumerate(paths):
        if progress is not None:
            progress(i + 1, len(paths), "decoded")
        image = decode_image(path, size)
        if image.shape[-1] != channels:
            if channels == 1:
                raise ZooError(f"{path}: {image.shape[-1]} channels, and the model was trained on 1 (greyscale)")
            image, grey = image.expand(-1, -1, 3), grey + 1
        out.append(image)
    if grey:
        log(f"{grey} greyscale of {len(paths)} images repeated to 3 channels (the model is colour)")
    return torch.stack(out).permute(0, 3, 1, 2).contiguous()


def item_names(paths: list[Path], root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() if p != root else p.name for p in paths]


def timm_folder(card: dict, load, out: Path, instead: str, label_names: list[str] | None = None) -> list[Path]:
    """A timm model folder (timm's ``save_for_hf``: ``model.safetensors`` + ``config.json`` with the input statistics
    and the zoo's resize, bilinear on the centre square, and ``label_names`` when given):
    ``timm.create_model("local-dir:FOLDER", pretrained=True)`` loads it. ``load()``: the run's model; the zoo's own
    networks and the small-image stem are refused in one line that names the formats to use ``instead``."""
    import timm.models

    arch, pre = card["architecture"], card["preprocess"]
    if arch["model"] in OWN_MODELS:
        raise ZooError(f"--format timm: {arch['model']} is the zoo's own network, not a timm model; export {instead}")
    model = load().to(memory_format=torch.contiguous_format)
    if isinstance(getattr(model, "maxpool", None), nn.Identity) and pre["image_size"] <= 64:
        raise ZooError(f"--format timm: this {arch['model']} has the zoo's small-image stem (3x3, no max-pool) "
                       f"that timm's architecture lacks; export {instead}")
    size = [pre["channels"], pre["image_size"], pre["image_size"]]
    timm.models.save_for_hf(model, str(out), safe_serialization=True, model_args={"in_chans": pre["channels"]},
                            model_config={"label_names": label_names} if label_names else None,
                            data_config={"input_size": size, "mean": pre["mean"], "std": pre["std"],
                                         "interpolation": "bilinear", "crop_pct": 1.0, "crop_mode": "center"})
    return [out / "model.safetensors", out / "config.json"]
