"""The images the image domains (vision, contrastive, diffusion) train on, registering no recipe: the declared image
datasets (``recipe_zoo.recipes.image_datasets``) and own class folders as ``ImageSplits`` of uint8 (N, C, H, W)
images, held in memory or read from disk as they are used (``recipe_zoo.recipes.image_streams``).

Reads top to bottom: the datasets held in memory, own class folders, a declared dataset read as its ``info`` says
its images are stored (``load_dataset``, the one dispatch over dataset names), then what vision and contrastive
load (``load_image_splits``). Files are decoded in ``image_decoding``, split in ``image_splits``; the networks are
in ``backbones``.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core import datasets, prepared, streams
from recipe_zoo.core.datasets import DatasetInfo
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes import image_streams, image_tables
from recipe_zoo.recipes.image_datasets import CIFAR10, CIFAR10_SUBSET, DIGITS, MNIST_TEST
from recipe_zoo.recipes.image_decoding import IMAGE_SUFFIXES, decode_images, own_image_size
from recipe_zoo.recipes.image_tables import LabelsTable
from recipe_zoo.recipes.image_splits import ImageSplits, carve_validation, content_keys, hash_parts, split_by_index

# the declared datasets load_image_splits reads by name, in the order its message lists them
NAMED_SETS = tuple(d.name for d in (DIGITS, MNIST_TEST, CIFAR10_SUBSET, CIFAR10))

# =============================================================================================
# Datasets held in memory: uint8 image tensors (N, C, H, W)
# =============================================================================================

def digits_arrays() -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """scikit-learn's 1,797 8x8 digits as uint8 (N, 1, 8, 8), their labels and class names: the file scikit-learn
    ships (``datasets/data/digits.csv.gz``: 64 pixels in 0-16, then the label, per row), read as ``load_digits``
    reads it but without importing scikit-learn, which costs a digits run about 2 s of its start."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if spec else None
    if path is not None and path.is_file():
        data = np.loadtxt(path, delimiter=",")
        images, target = data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    else:  # another layout of scikit-learn's files: its loader
        from sklearn.datasets import load_digits

        digits = load_digits()
        images, target = digits.images, digits.target
    x = torch.from_numpy(images * (255.0 / 16.0)).round().to(torch.uint8).unsqueeze(1)  # (1797, 1, 8, 8)
    return x, torch.from_numpy(target).long(), [str(c) for c in range(10)]


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


def fixed_test_split(x: torch.Tensor, y: torch.Tensor, classes: list[str], name: str,
                     val_fraction: float = 0.1) -> ImageSplits:
    """A dataset's own fixed test split: a stratified 20% (seed 0); validation carved from the rest."""
    from sklearn.model_selection import train_test_split

    tr, te = train_test_split(np.arange(len(y)), test_size=0.2, random_state=0, stratify=y.numpy())
    return carve_validation(x, y, content_keys(x), tr, te, val_fraction, classes, name, "fixed stratified 20%, seed 0")


def load_digits_splits(val_fraction: float = 0.1) -> ImageSplits:
    """digits with its fixed test split (360 images); validation carved from the other 1,437."""
    return fixed_test_split(*digits_arrays(), DIGITS.name, val_fraction)


def load_torchvision_cifar10(root: Path, name: str, val_fraction: float) -> ImageSplits:
    """Full CIFAR-10 through torchvision's downloader into ``root``: its official 10,000 test images; validation
    carved from the 50,000 training images."""
    from torchvision.datasets import CIFAR10 as TorchvisionCIFAR10

    try:
        sets = [TorchvisionCIFAR10(str(root), train=t, download=True) for t in (True, False)]
    except (OSError, RuntimeError) as exc:
        raise ZooError(f"{name}: torchvision could not download to {root} ({exc}); offline, use "
                       f"data={CIFAR10_SUBSET.name} or place cifar-10-batches-py there") from None
    x = torch.cat([torch.from_numpy(s.data).permute(0, 3, 1, 2) for s in sets]).contiguous()
    y = torch.cat([torch.tensor(s.targets) for s in sets])
    n = len(sets[0].targets)
    return carve_validation(x, y, content_keys(x), np.arange(n), np.arange(n, len(y)), val_fraction,
                            list(sets[0].classes), name, "the official 10,000")


# =============================================================================================
# Own class folders, decoded in memory or read as they are used
# =============================================================================================

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
                       flat_val_fraction: float | None = None, stream: bool = False,
                       labels: LabelsTable = LabelsTable()) -> ImageSplits:
    """An own folder at ``size`` (``image_decoding.decode_image``; 0: ``own_image_size`` of the training part;
    None: the images' own), keyed by each file's path relative to ``root``:

    - a labels table (``labels.csv`` in the folder, or ``labels``): its rows' files and labels; its split column's
      parts where it has one (validation hash-chosen from train when it names only train and test), else split as
      class folders are;
    - ``train/``, ``val/`` and ``test/``: the three parts as given;
    - ``train/`` and one of ``val/`` or ``test/``: that folder is the test set, and validation is a hash-chosen
      ``val_fraction`` of ``train/``;
    - class folders only: a hash-chosen ``test_fraction`` is the test set and a hash-chosen ``val_fraction``
      of the rest (``flat_val_fraction`` when given) validation.

    ``stream``: the parts are lazy arrays decoding their files when read (``image_streams.folder_images``)."""
    table = image_tables.find_table(root, labels)
    if table is not None:
        return _table_splits(root, image_tables.read_listing(table, labels, log), size, val_fraction, test_fraction,
                             log, flat_val_fraction, stream)
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
    return _decoded(root, out, paths, size, log, stream)


def _table_splits(root: Path, listing: image_tables.Listing, size, val_fraction: float, test_fraction: float, log,
                  flat_val_fraction: float | None, stream: bool) -> ImageSplits:
    """The images a labels table lists, split by its split column or, without one, by a hash of each path."""
    paths, name, root = listing.paths, listing.table.name, root if root.is_dir() else root.parent
    index, y = torch.arange(len(paths)), torch.tensor(listing.labels)
    keys = [p.relative_to(listing.table.parent).as_posix() if p.is_relative_to(listing.table.parent) else str(p)
            for p in paths]
    if listing.split is not None:
        parts = [np.array([i for i, s in enumerate(listing.split) if s == part], dtype=np.int64)
                 for part in ("train", "val", "test")]
        if not len(parts[0]) or not len(parts[2]):
            raise ZooError(f"{listing.table}: its split column names {len(parts[0])} train and {len(parts[2])} test "
                           "images; it needs both (val is optional: carved from train by a hash)")
        if len(parts[1]):
            out = split_by_index(index, y, keys, parts, listing.classes, root.name, "")
            out.how = f"{out.sizes()} (the split column of {name})"
        else:
            out = carve_validation(index, y, keys, parts[0], parts[2], val_fraction, listing.classes, root.name,
                                   f"the split column of {name}")
    else:
        try:
            parts = hash_parts(keys, flat_val_fraction or val_fraction, test_fraction)
        except ZooError as exc:
            raise ZooError(f"{listing.table}: {exc}") from None
        how = (f"{len(parts[0])} train / {len(parts[1])} validation / {len(parts[2])} test (hash of each file's path "
               f"in {name}: test {test_fraction:g} of the images, validation {flat_val_fraction or val_fraction:.3g} "
               "of the rest)")
        out = split_by_index(index, y, keys, parts, listing.classes, root.name, how)
    return _decoded(root, out, paths, size, log, stream)


def _decoded(root: Path, out: ImageSplits, paths: list[Path], size, log, stream: bool) -> ImageSplits:
    """``out``'s parts (file indices) as images: decoded now, or as they are read (``stream``)."""
    if not len(out.train_y) or not len(out.val_y):
        raise ZooError(f"{root}: {out.sizes()} images: too few to train and validate")
    size = own_image_size([paths[i] for i in out.train_x], log) if size == 0 else size
    x = image_streams.folder_images(paths, size, root, log) if stream else decode_images(paths, size, root, log)
    out.train_x, out.val_x, out.test_x = (streams.rows(x, part) for part in (out.train_x, out.val_x, out.test_x))
    log(f"{root}: {out.sizes()} images, {len(out.classes)} classes")
    return out


def resize_splits(data: ImageSplits, size: int) -> None:
    """Resize the three parts' uint8 images to size x size (antialiased bilinear; streamed parts as they are read)."""
    parts = (data.train_x, data.val_x, data.test_x)
    data.train_x, data.val_x, data.test_x = (image_streams.resized(t, size) for t in parts)


# =============================================================================================
# Declared datasets, read as their info says their images are stored
# =============================================================================================

def dataset_arrays(info: DatasetInfo) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """A declared dataset held in memory (``info["images"]``: "sklearn digits" or "mnist idx"): its images,
    labels and class names."""
    stored = info.info["images"]
    if stored == "sklearn digits":
        return digits_arrays()
    if stored == "mnist idx":
        x, y = mnist_test_arrays(datasets.locate(info.name))
        return x, y, [str(i) for i in range(10)]
    raise ZooError(f"data={info.name}: its images ({stored}) are not held in memory")


def load_dataset(info: DatasetInfo, size: int | None, val_fraction: float, test_fraction: float, log=print,
                 split_arrays=None, **folder_options) -> ImageSplits:
    """A declared image dataset, read as ``info["images"]`` says its images are stored: class folders in the cache
    are read as an own folder is (``load_folder_splits`` with ``folder_options``); images held in memory are split
    by ``split_arrays(x, y, classes, name)``, by default the dataset's own fixed test split (``fixed_test_split``);
    torchvision's CIFAR-10 keeps its official test split."""
    stored = info.info["images"]
    if stored == "class folders":
        return load_folder_splits(datasets.locate(info.name), size, val_fraction, test_fraction, log, **folder_options)
    if stored == "torchvision cifar10":
        return load_torchvision_cifar10(datasets.locate(info.name), info.name, val_fraction)
    split_arrays = split_arrays or functools.partial(fixed_test_split, val_fraction=val_fraction)
    return split_arrays(*dataset_arrays(info), info.name)


def default_flip(name: str, named: tuple[str, ...] = NAMED_SETS) -> str:
    """``flip=auto``: "off" on a dataset of handwritten symbols (``info["handwritten"]``: a mirrored digit is another
    symbol), else "on". ``name``: the loaded images' (``ImageSplits.name``; an own folder's is the folder's name);
    ``named``: the datasets the recipe reads by name."""
    return "off" if name in named and datasets.get(name).info.get("handwritten") else "on"


# =============================================================================================
# What vision and contrastive load: a declared dataset, an own folder or a prepared one
# =============================================================================================

def load_image_splits(data: str, image_size: int, val_fraction: float, test_fraction: float, run,
                      stream: bool = False, labels: LabelsTable = LabelsTable()) -> ImageSplits:
    """A named dataset or a folder of class folders; ``image_size`` 0 keeps the dataset's own size (own
    folders: ``own_image_size``). ``val_fraction``: validation's share of the training images; ``test_fraction``:
    the test share of a folder that has no test split of its own. ``stream``: folders are decoded as they are read;
    a prepared folder (``zoo data prepare``) is always read as it is used."""
    size = image_size or None
    if prepared.is_prepared(data):
        settings = {"image_size": image_size, "val_fraction": val_fraction, "test_fraction": test_fraction}
        return image_streams.open_prepared(Path(data), settings, run.log)
    if data in NAMED_SETS:
        out = load_dataset(datasets.get(data), size, val_fraction, test_fraction, run.log, stream=stream)
    elif Path(data).exists():
        out = load_folder_splits(Path(data), image_size, val_fraction, test_fraction, run.log, stream=stream,
                                 labels=labels)
        if not image_size:
            run.report("image_size", out.train_x.shape[-1])
    else:
        raise ZooError(f"data={data!r}: not a vision dataset ({', '.join(NAMED_SETS)}) nor an existing folder")
    if len(out.classes) < 2:  # vision and contrastive classify (contrastive's kNN): one class teaches nothing
        raise ZooError(f"data={data}: one class only ({out.classes[0]!r}); classifying needs two classes or more")
    if size and out.train_x.shape[-1] != size:
        resize_splits(out, size)
    return out
