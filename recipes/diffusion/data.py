"""Diffusion data: uint8 image tensors (N, C, H, W) in memory, from the shared image loaders
(``recipe_zoo.recipes.images``), and the conversion to and from the model's [-1, 1] range.
``cfg`` is the recipe's config (``DiffusionConfig`` in ``ddpm.py``)."""
from __future__ import annotations

from pathlib import Path

import torch

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.images import load_digits_splits, load_folder_splits, load_mnist_test_splits, resize_splits

# =============================================================================================
# Data: uint8 image tensors (N, C, H, W) in memory
# =============================================================================================

def load_mnist_generative(root: Path):
    """MNIST's 10,000 test images split once into 9,000 training and 1,000 held-out (stratified, seed 0)."""
    return load_mnist_test_splits(root, test_size=1000, name="mnist")


def load_data(cfg, run):
    size = cfg.image_size or None
    if cfg.data == "digits":
        data = load_digits_splits()
    elif cfg.data == "mnist":
        data = load_mnist_generative(run.data_path("mnist"))
    elif cfg.data == "cifar10-subset":
        data = load_folder_splits(run.data_path("cifar10-subset"), size, cfg.val_fraction, run.log)
    elif Path(cfg.data).exists():
        data = load_folder_splits(Path(cfg.data), size or 32, cfg.val_fraction, run.log)
    else:
        raise ZooError(f"data={cfg.data!r}: not a diffusion dataset (digits, mnist, cifar10-subset) nor an "
                       "existing folder")
    if size and data.train_x.shape[-1] != size:
        resize_splits(data, size)
    if len(data.test_y) < 2:
        raise ZooError(f"data={cfg.data}: {len(data.test_y)} held-out image(s); the FID needs at least 2")
    return data


def to_model_range(x_uint8: torch.Tensor) -> torch.Tensor:
    return x_uint8.float() / 127.5 - 1.0


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    return ((x.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
