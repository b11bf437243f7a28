"""New images for a trained model (``zoo predict``), shared by the image domains: a folder (flat, or class
subfolders named as the run's classes) or one file, decoded as training decoded its own folders
(``images.decode_image``: centre square at the model's size) with the model's channel count."""
from __future__ import annotations

from pathlib import Path

import torch

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.images import IMAGE_SUFFIXES, decode_image


def list_images(data: str, classes: list[str] | None = None, log=print) -> tuple[list[Path], list[int] | None, Path]:
    """(files, labels or None, root): class subfolders named as ``classes`` give labels (the metric can be
    computed); any other folder is read flat, recursively. Non-image files are counted, never read."""
    root = Path(data)
    if not root.exists():
        raise ZooError(f"data={data}: no such file or folder")
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
