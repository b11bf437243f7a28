"""Diffusion data: uint8 image tensors (N, C, H, W) in memory, from the shared image loaders
(``recipe_zoo.recipes.images``), split train / validation / test, and the conversion to and from the model's
[-1, 1] range. ``cfg`` is the recipe's config (``DiffusionConfig`` in ``ddpm.py``)."""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from recipe_zoo.core import datasets
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.diffusion.datasets import MNIST
from recipe_zoo.recipes import image_tables
from recipe_zoo.recipes.image_datasets import CIFAR10_SUBSET, DIGITS
from recipe_zoo.recipes.image_splits import ImageSplits, content_keys, hash_parts, keep_classes, split_by_index
from recipe_zoo.recipes.images import default_flip, load_dataset, load_folder_splits, resize_splits

# the declared datasets the diffusion recipes read by name, in the order their message lists them
NAMED_SETS = tuple(d.name for d in (DIGITS, MNIST, CIFAR10_SUBSET))

# =============================================================================================
# Data: uint8 image tensors (N, C, H, W) in memory
# =============================================================================================

def check_fractions(val_fraction: float, test_fraction: float) -> None:
    """Validation and test shares that leave images to train on (refused before any data loads)."""
    for key, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 1:
            raise ZooError(f"{key}={value}: must be in (0, 1)")
    if val_fraction + test_fraction >= 1:
        raise ZooError(f"val_fraction={val_fraction} + test_fraction={test_fraction}: leave images to train on")


def hash_split_arrays(x: torch.Tensor, y: torch.Tensor, classes: list[str], name: str, val_fraction: float,
                      test_fraction: float) -> ImageSplits:
    """Images in memory, keyed by their content: a hash-chosen ``test_fraction`` of them is the test set, and
    as large a hash-chosen ``val_fraction`` validation (mnist: about 1,000 and 1,000 of the 10,000)."""
    keys = content_keys(x)
    parts = hash_parts(keys, val_fraction / (1 - test_fraction), test_fraction)
    how = (f"{len(parts[0])} train / {len(parts[1])} validation / {len(parts[2])} test (hash of each image: "
           f"{val_fraction:g} and {test_fraction:g} of the {len(y)})")
    return split_by_index(x, y, keys, parts, classes, name, how)


def load_data(cfg, run) -> ImageSplits:
    size = cfg.image_size or None
    # a folder of class folders only: validation as large a share of all its images as test
    flat_val = cfg.val_fraction / (1 - cfg.test_fraction)
    if cfg.data in NAMED_SETS:  # those held in memory split by a hash of each image
        split = functools.partial(hash_split_arrays, val_fraction=cfg.val_fraction, test_fraction=cfg.test_fraction)
        data = load_dataset(datasets.get(cfg.data), size, cfg.val_fraction, cfg.test_fraction, run.log,
                            split_arrays=split, flat_val_fraction=flat_val)
    elif Path(cfg.data).exists():
        data = load_folder_splits(Path(cfg.data), cfg.image_size, cfg.val_fraction, cfg.test_fraction, run.log,
                                  flat_val_fraction=flat_val, labels=image_tables.labels_table(cfg))
        if not cfg.image_size:
            run.report("image_size", data.train_x.shape[-1])
    else:
        raise ZooError(f"data={cfg.data!r}: not a diffusion dataset ({', '.join(NAMED_SETS)}) nor an existing folder")
    if cfg.classes:
        data = keep_classes(data, cfg.classes, cfg.data, run.log)
    if size and data.train_x.shape[-1] != size:
        resize_splits(data, size)
    if min(len(data.val_y), len(data.test_y)) < 2:
        raise ZooError(f"data={cfg.data}: {len(data.val_y)} validation / {len(data.test_y)} test image(s); the FID "
                       "needs at least 2 of each")
    return data


def resolve_flip(flip: str, name: str) -> str:
    """``flip`` as the run trains: auto is on, except on handwritten digits (``images.default_flip``)."""
    return flip if flip != "auto" else default_flip(name, NAMED_SETS)


def to_model_range(x_uint8: torch.Tensor) -> torch.Tensor:
    return x_uint8.float() / 127.5 - 1.0


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    return ((x.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
