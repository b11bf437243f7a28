"""Images for the image domains (vision, contrastive, diffusion): what they share, registering no recipe.

Reads top to bottom: the named datasets and own class folders as uint8 tensors (in memory, or read from disk as
they are used: ``recipe_zoo.recipes.image_streams``), then the dispatcher over them. The networks are in
``recipe_zoo.recipes.backbones``; their names are re-exported here, where the image domains have always found them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core import prepared, splits, streams
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.progress import Progress
from recipe_zoo.recipes.backbones import (OWN_MODELS, ZooNet, ZooResNet, build_model,  # noqa: F401
                                          input_stats, shift_norm)

# =============================================================================================
# Data: uint8 image tensors (N, C, H, W) in memory, split train / validation / test
# =============================================================================================

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm"}
PARTS = ("train", "validation", "test")
GREY_MODES = ("1", "L", "LA", "La", "I", "F")  # Pillow modes read as one channel (and I;16*)


@dataclass
class ImageSplits:
    """Train / validation / test images with their labels. Selection reads validation only; test is scored
    once, at the end. ``keys``: each part's item keys (a file's path relative to the dataset root, or an
    in-memory image's content), what ``run.record_split`` writes; ``how``: the split in one line."""
    train_x: torch.Tensor  # (N, C, H, W) uint8
    train_y: torch.Tensor  # (N,) int64
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: list[str]
    name: str
    keys: dict[str, list] = field(default_factory=dict)  # "train" | "validation" | "test" -> item keys
    how: str = ""  # e.g. "1293 train / 144 validation (...) / 360 test (...)"

    def sizes(self) -> str:
        return f"{len(self.train_y)} train / {len(self.val_y)} validation / {len(self.test_y)} test"


def content_keys(x: torch.Tensor) -> list[bytes]:
    """The key of each in-memory image: its bytes (identical images share a side of every split)."""
    return [splits.content_key(img) for img in x.numpy()]


def hash_parts(keys: list, val_fraction: float, test_fraction: float = 0.0) -> tuple[np.ndarray, ...]:
    """Indices (train, validation, test) by a hash of each item's key: test the items whose hash (salt "test")
    falls below ``test_fraction`` (none when 0), validation those of the rest whose hash falls below
    ``val_fraction`` (``splits.carve``): the same items on every machine, in any order."""
    n = len(keys)
    test = splits.carve(keys, test_fraction, salt="test") if test_fraction else np.zeros(n, dtype=bool)
    rest = np.flatnonzero(~test)
    if len(rest) < 2:
        raise ZooError(f"{n} images are too few for train, validation and test parts")
    val = np.zeros(n, dtype=bool)
    val[rest[splits.carve([keys[i] for i in rest], val_fraction)]] = True
    return np.flatnonzero(~test & ~val), np.flatnonzero(val), np.flatnonzero(test)


def split_by_index(x: torch.Tensor, y: torch.Tensor, keys: list, parts: tuple, classes: list[str], name: str,
                   how: str) -> ImageSplits:
    """An ``ImageSplits`` of one set of images from index arrays (train, validation, test)."""
    tr, va, te = (torch.as_tensor(p, dtype=torch.long) for p in parts)
    return ImageSplits(x[tr], y[tr], x[va], y[va], x[te], y[te], classes, name,
                       keys={part: [keys[i] for i in p] for part, p in zip(PARTS, parts)}, how=how)


def carve_validation(x: torch.Tensor, y: torch.Tensor, keys: list, train: np.ndarray, test: np.ndarray,
                     val_fraction: float, classes: list[str], name: str, test_how: str) -> ImageSplits:
    """Data that ships (or is given once) a fixed train/test split: validation is a hash-chosen
    ``val_fraction`` of the training items."""
    train = np.asarray(train)
    held = splits.carve([keys[i] for i in train], val_fraction)
    parts = (train[~held], train[held], np.asarray(test))
    how = (f"{len(parts[0])} train / {len(parts[1])} validation (hash of each image, {val_fraction:g} of train) / "
           f"{len(parts[2])} test ({test_how})")
    return split_by_index(x, y, keys, parts, classes, name, how)


def digits_arrays() -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """scikit-learn's 1,797 8x8 digits as uint8 (N, 1, 8, 8), their labels and class names."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.from_numpy(digits.images * (255.0 / 16.0)).round().to(torch.uint8).unsqueeze(1)  # (1797, 1, 8, 8)
    return x, torch.from_numpy(digits.target).long(), [str(c) for c in digits.target_names]


def load_digits_splits(val_fraction: float = 0.1) -> ImageSplits:
    """The fixed stratified 20% test split (seed 0: 360 images); validation carved from the other 1,437."""
    from sklearn.model_selection import train_test_split

    x, y, classes = digits_arrays()
    tr, te = train_test_split(np.arange(len(y)), test_size=0.2, random_state=0, stratify=y.numpy())
    return carve_validation(x, y, content_keys(x), tr, te, val_fraction, classes, "digits",
                            "fixed stratified 20%, seed 0")


def read_idx(path: Path) -> torch.Tensor:
    """An MNIST idx file (gzipped or not): magic, dims, then uint8 data."""
    import gzip
    import struct

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
        zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
        dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
        if zero != 0 or dtype != 0x08 or len(raw) != 4 + 4 * ndim + math.prod(dims):
            raise ValueError("not a uint8 idx file")
    except (OSError, ValueError, struct.error) as exc:
        raise ZooError(f"{path}: cannot read idx data ({exc})") from None
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).view(*dims)


def mnist_test_arrays(root: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST's 10,000 test images (N, 1, 28, 28) uint8 and their labels."""
    x = read_idx(root / "t10k-images-idx3-ubyte.gz").unsqueeze(1)  # (10000, 1, 28, 28)
    y = read_idx(root / "t10k-labels-idx1-ubyte.gz").long()
    if len(x) != len(y):
        raise ZooError(f"{root}: {len(x)} images but {len(y)} labels")
    return x, y


def load_mnist_test_splits(root: Path, val_fraction: float = 0.1) -> ImageSplits:
    """MNIST's 10,000 test images: a fixed stratified 20% test split (seed 0), validation carved from the rest."""
    from sklearn.model_selection import train_test_split

    x, y = mnist_test_arrays(root)
    tr, te = train_test_split(np.arange(len(y)), test_size=0.2, random_state=0, stratify=y.numpy())
    return carve_validation(x, y, content_keys(x), tr, te, val_fraction, [str(i) for i in range(10)], "mnist-test",
                            "fixed stratified 20%, seed 0")


def decode_image(path: Path, size: int | None) -> torch.Tensor:
    """One image file as (H, W, C) uint8: one channel for a greyscale file, else RGB. With a size: its centre square
    resized to size x size (Pillow's bilinear, antialiased when shrinking), so the aspect ratio is kept."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:  # grey: 1-bit, 8-bit with or without alpha, 16- and 32-bit
            im = im.convert("L" if im.mode in GREY_MODES or im.mode.startswith("I;16") else "RGB")
            if size and im.size != (size, size):
                w, h, s = *im.size, min(im.size)  # the centre square, s x s
                im = im.resize((size, size), Image.BILINEAR, box=((w - s) / 2, (h - s) / 2, (w + s) / 2, (h + s) / 2))
            return torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(im.size[1], im.size[0], -1)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ZooError(f"{path}: cannot decode image ({exc})") from None


def decode_images(paths: list[Path], size: int | None, root: Path, log=print) -> torch.Tensor:
    """The files as (N, C, H, W) uint8 at ``size`` (``decode_image``): one channel when all are grey, else RGB."""
    progress = Progress(len(paths), f"{root}: decoding", log, "images")
    images = []
    for p in paths:
        images.append(decode_image(p, size))
        progress.update()
    progress.done()
    shapes = {tuple(im.shape[:2]) for im in images}
    if len(shapes) > 1:
        raise ZooError(f"{root}: images have different sizes {sorted(shapes)[:3]}...; set image_size=N to resize")
    grey = sum(im.shape[-1] == 1 for im in images)
    if 0 < grey < len(images):
        log(f"{root}: {grey} greyscale of {len(images)} images converted to RGB (the others are colour)")
        images = [im.expand(-1, -1, 3) for im in images]  # grey repeated to three channels, as PIL converts it
    return torch.stack(images).permute(0, 3, 1, 2).contiguous()


def own_image_size(paths: list[Path], log=print) -> int:
    """``image_size`` 0 on own images: the median short side of ``paths`` (the training part's file headers) rounded
    to 32, within [32, 224]: small images keep their detail, photos shrink to what a CPU trains on, halving evenly."""
    from PIL import Image, UnidentifiedImageError

    sides = []
    for path in paths:
        try:
            with Image.open(path) as im:  # the header only: no pixels decoded
                sides.append(min(im.size))
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            raise ZooError(f"{path}: cannot decode image ({exc})") from None
    median = float(np.median(sides))
    size = min(max(int(median / 32 + 0.5) * 32, 32), 224)
    log(f"image size {size} px: the median short side {median:g} px rounded to 32, within [32, 224] "
        "(set image_size=N to choose)")
    return size


def list_class_folder(root: Path, classes: list[str] | None = None, log=print) -> tuple[list, list, list]:
    """The image files under ``root/<class>/``: (paths, labels, classes). Non-image files are counted.
    ``classes`` given: the held-out split of a training folder (one of its class folders may be empty)."""
    training = classes is None
    if not root.exists():
        raise ZooError(f"{root}: folder not found")
    if not root.is_dir():
        raise ZooError(f"{root}: not a folder (expected {root}/<class>/<image files>)")
    classes = classes or sorted(d.name for d in root.iterdir() if d.is_dir())
    if not classes:
        raise ZooError(f"{root}: no class subfolders (expected {root}/<class>/<image files>)")
    paths, labels, skipped, empty = [], [], 0, []
    for label, name in enumerate(classes):
        folder = root / name
        if not folder.is_dir():
            raise ZooError(f"{root}: class folder {name!r} is missing here but present in the training split")
        before = len(paths)
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
                paths.append(path)
                labels.append(label)
            elif path.is_file():
                skipped += 1
        if len(paths) == before:
            empty.append(folder)
    if not paths:
        raise ZooError(f"{root}: no images found in {len(classes)} class folders")
    if empty and training:  # a class the model could never learn: almost always a copy that went wrong
        raise ZooError(f"{empty[0]}: class folder holds no images ({len(empty)} of {len(classes)} class folders "
                       "are empty); add images or remove the folder")
    if skipped:
        log(f"{root}: skipped {skipped} non-image files")
    return paths, labels, classes


def load_folder_splits(root: Path, size: int | None, val_fraction: float, test_fraction: float, log=print,
                       flat_val_fraction: float | None = None, stream: bool = False) -> ImageSplits:
    """An own folder at ``size`` (``decode_image``; 0: ``own_image_size`` of the training part; None: the images'
    own), keyed by each file's path relative to ``root``:

    - ``train/``, ``val/`` and ``test/``: the three parts as given;
    - ``train/`` and one of ``val/`` or ``test/``: that folder is the test set, and validation is a hash-chosen
      ``val_fraction`` of ``train/``;
    - class folders only: a hash-chosen ``test_fraction`` is the test set and a hash-chosen ``val_fraction``
      of the rest (``flat_val_fraction`` when given) validation.

    ``stream``: the parts are lazy arrays decoding their files when read (``image_streams.folder_images``)."""
    held_out = [d for d in ("val", "test") if (root / d).is_dir()] if (root / "train").is_dir() else []
    paths, labels, ends, classes = [], [], [], None
    for folder in [root / "train", *(root / d for d in held_out)] if held_out else [root]:
        more, more_labels, classes = list_class_folder(folder, classes, log=log)
        paths, labels, ends = paths + more, labels + more_labels, ends + [len(paths) + len(more)]
    # the files' indices are split first: the size rule reads the training part's headers before any decoding
    index, y, keys = torch.arange(len(paths)), torch.tensor(labels), [p.relative_to(root).as_posix() for p in paths]
    if len(held_out) == 2:  # a three-way split of its own: kept
        out = split_by_index(index, y, keys, np.split(np.arange(len(paths)), ends[:-1]), classes, root.name, "")
        out.how = f"{out.sizes()} (train/, val/ and test/ as given)"
    elif held_out:
        out = carve_validation(index, y, keys, np.arange(ends[0]), np.arange(ends[0], ends[1]), val_fraction,
                               classes, root.name, f"{held_out[0]}/")
    else:
        try:
            parts = hash_parts(keys, flat_val_fraction or val_fraction, test_fraction)
        except ZooError as exc:
            raise ZooError(f"{root}: {exc}") from None
        how = (f"{len(parts[0])} train / {len(parts[1])} validation / {len(parts[2])} test (hash of each file's path: "
               f"test {test_fraction:g} of the images, validation {flat_val_fraction or val_fraction:.3g} of the rest)")
        out = split_by_index(index, y, keys, parts, classes, root.name, how)
    if not len(out.train_y) or not len(out.val_y):
        raise ZooError(f"{root}: {out.sizes()} images: too few to train and validate")
    size = own_image_size([paths[i] for i in out.train_x], log) if size == 0 else size
    if stream:
        from recipe_zoo.recipes.image_streams import folder_images

        x = folder_images(paths, size, root, log)
    else:
        x = decode_images(paths, size, root, log)
    out.train_x, out.val_x, out.test_x = (streams.rows(x, part) for part in (out.train_x, out.val_x, out.test_x))
    log(f"{root}: {out.sizes()} images, {len(out.classes)} classes")
    return out


def load_torchvision_cifar10(root: Path, val_fraction: float) -> ImageSplits:
    from torchvision.datasets import CIFAR10

    try:
        sets = [CIFAR10(str(root), train=t, download=True) for t in (True, False)]
    except (OSError, RuntimeError) as exc:
        raise ZooError(f"cifar10: torchvision could not download to {root} ({exc}); offline, use "
                       "data=cifar10-subset or place cifar-10-batches-py there") from None
    x = torch.cat([torch.from_numpy(s.data).permute(0, 3, 1, 2) for s in sets]).contiguous()
    y = torch.cat([torch.tensor(s.targets) for s in sets])
    n = len(sets[0].targets)
    return carve_validation(x, y, content_keys(x), np.arange(n), np.arange(n, len(y)), val_fraction,
                            list(sets[0].classes), "cifar10", "the official 10,000")


def resize_splits(data: ImageSplits, size: int) -> None:
    """Resize the three parts' uint8 images to size x size (antialiased bilinear; streamed parts as they are read)."""
    from recipe_zoo.recipes.image_streams import resized

    data.train_x, data.val_x, data.test_x = (resized(t, size) for t in (data.train_x, data.val_x, data.test_x))


def load_image_splits(data: str, image_size: int, val_fraction: float, test_fraction: float, run,
                      stream: bool = False) -> ImageSplits:
    """A named dataset or a folder of class folders; ``image_size`` 0 keeps the dataset's own size (own
    folders: ``own_image_size``). ``val_fraction``: validation's share of the training images; ``test_fraction``:
    the test share of a folder that has no test split of its own. ``stream``: folders are decoded as they are read;
    a prepared folder (``zoo data prepare``) is always read as it is used."""
    size = image_size or None
    if prepared.is_prepared(data):
        from recipe_zoo.recipes.image_streams import open_prepared

        settings = {"image_size": image_size, "val_fraction": val_fraction, "test_fraction": test_fraction}
        return open_prepared(Path(data), settings, run.log)
    if data == "digits":
        out = load_digits_splits(val_fraction)
    elif data == "cifar10-subset":
        out = load_folder_splits(run.data_path("cifar10-subset"), size, val_fraction, test_fraction, run.log,
                                 stream=stream)
    elif data == "mnist-test":
        out = load_mnist_test_splits(run.data_path("mnist-test"), val_fraction)
    elif data == "cifar10":
        out = load_torchvision_cifar10(run.data_path("cifar10"), val_fraction)
    elif Path(data).exists():
        out = load_folder_splits(Path(data), image_size, val_fraction, test_fraction, run.log, stream=stream)
        if not image_size:
            run.report("image_size", out.train_x.shape[-1])
    else:
        raise ZooError(f"data={data!r}: not a vision dataset (digits, mnist-test, cifar10-subset, cifar10) nor an "
                       "existing folder")
    if size and out.train_x.shape[-1] != size:
        resize_splits(out, size)
    return out

