"""Diffusion data: uint8 image tensors (N, C, H, W) in memory, from the shared image loaders
(``recipe_zoo.recipes.images``), split train / validation / test, and the conversion to and from the model's
[-1, 1] range. ``cfg`` is the recipe's config (``DiffusionConfig`` in ``ddpm.py``)."""
from __future__ import annotations

from pathlib import Path

import torch

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.images import (ImageSplits, content_keys, digits_arrays, hash_parts, load_folder_splits,
                                       mnist_test_arrays, resize_splits, split_by_index)

# =============================================================================================
# Data: uint8 image tensors (N, C, H, W) in memory
# =============================================================================================

def check_fractions(cfg) -> None:
    """Validation and test shares that leave images to train on (refused before any data loads)."""
    for key in ("val_fraction", "test_fraction"):
        if not 0 < getattr(cfg, key) < 1:
            raise ZooError(f"{key}={getattr(cfg, key)}: must be in (0, 1)")
    if cfg.val_fraction + cfg.test_fraction >= 1:
        raise ZooError(f"val_fraction={cfg.val_fraction} + test_fraction={cfg.test_fraction}: leave images to train on")


def hash_split_arrays(x: torch.Tensor, y: torch.Tensor, classes: list[str], name: str, cfg) -> ImageSplits:
    """Images in memory, keyed by their content: a hash-chosen ``test_fraction`` of them is the test set, and
    as large a hash-chosen ``val_fraction`` validation (mnist: about 1,000 and 1,000 of the 10,000)."""
    keys = content_keys(x)
    parts = hash_parts(keys, cfg.val_fraction / (1 - cfg.test_fraction), cfg.test_fraction)
    how = (f"{len(parts[0])} train / {len(parts[1])} validation / {len(parts[2])} test (hash of each image: "
           f"{cfg.val_fraction:g} and {cfg.test_fraction:g} of the {len(y)})")
    return split_by_index(x, y, keys, parts, classes, name, how)


def load_data(cfg, run) -> ImageSplits:
    size = cfg.image_size or None
    # a folder of class folders only: validation as large a share of all its images as test
    flat_val = cfg.val_fraction / (1 - cfg.test_fraction)
    if cfg.data == "digits":
        data = hash_split_arrays(*digits_arrays(), "digits", cfg)
    elif cfg.data == "mnist":
        data = hash_split_arrays(*mnist_test_arrays(run.data_path("mnist")), [str(i) for i in range(10)], "mnist", cfg)
    elif cfg.data == "cifar10-subset":
        data = load_folder_splits(run.data_path("cifar10-subset"), size, cfg.val_fraction, cfg.test_fraction, run.log,
                                  flat_val_fraction=flat_val)
    elif Path(cfg.data).exists():
        data = load_folder_splits(Path(cfg.data), cfg.image_size, cfg.val_fraction, cfg.test_fraction, run.log,
                                  flat_val_fraction=flat_val)
        if not cfg.image_size:
            run.report("image_size", data.train_x.shape[-1])
    else:
        raise ZooError(f"data={cfg.data!r}: not a diffusion dataset (digits, mnist, cifar10-subset) nor an "
                       "existing folder")
    if size and data.train_x.shape[-1] != size:
        resize_splits(data, size)
    if min(len(data.val_y), len(data.test_y)) < 2:
        raise ZooError(f"data={cfg.data}: {len(data.val_y)} validation / {len(data.test_y)} test image(s); the FID "
                       "needs at least 2 of each")
    return data


def to_model_range(x_uint8: torch.Tensor) -> torch.Tensor:
    return x_uint8.float() / 127.5 - 1.0


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    return ((x.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
