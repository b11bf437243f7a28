"""Contrastive data: unlabelled images to pretrain on, labelled splits to evaluate on, and the two augmented
views of each image. ``cfg`` is the recipe's config (``ContrastiveConfig`` in ``simclr.py``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from recipe_zoo.core.batches import to_device
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes import image_tables
from recipe_zoo.recipes.image_decoding import IMAGE_SUFFIXES, decode_images, own_image_size
from recipe_zoo.recipes.image_splits import ImageSplits, content_keys
from recipe_zoo.recipes.images import default_flip, load_folder_splits, load_image_splits, resize_splits

# =============================================================================================
# Data: unlabelled images to pretrain on, labelled splits to evaluate on
# =============================================================================================

@dataclass
class SSLData:
    """What pretraining sees (never a label, never a validation or test image) and the labelled splits the
    frozen features are scored on: kNN bank and probe training set = ``eval.train_*``; queries =
    ``eval.val_*`` while training, ``eval.test_*`` once at the end."""
    pretrain_x: torch.Tensor  # (N, C, H, W) uint8
    eval: ImageSplits
    pretrain_keys: list  # the pretraining images' keys (paths relative to ``data``), for split.csv


def load_unlabelled_folder(root: Path, size: int, log=print) -> tuple[torch.Tensor, list[str]]:
    """Every image under ``root`` (any depth, class folders or none) at ``size`` (0: ``own_image_size`` of
    them all) and its path relative to ``root``; other files are counted."""
    if not root.exists():
        raise ZooError(f"{root}: folder not found")
    if not root.is_dir():
        raise ZooError(f"{root}: not a folder (with eval_data, data is a folder of unlabelled images)")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    paths = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    if not paths:
        raise ZooError(f"{root}: no images found (expected image files under it)")
    if len(files) > len(paths):
        log(f"{root}: skipped {len(files) - len(paths)} non-image files")
    x = decode_images(paths, size or own_image_size(paths, log), root, log)
    return x, [p.relative_to(root).as_posix() for p in paths]


def without_held_out(x: torch.Tensor, keys: list, splits: ImageSplits, log, root) -> tuple[torch.Tensor, list]:
    """The unlabelled images minus exact copies of a validation or test image: those stay out of pretraining."""
    held = set(content_keys(splits.val_x)) | set(content_keys(splits.test_x))
    keep = [i for i, k in enumerate(content_keys(x)) if k not in held]
    if len(keep) < len(keys):
        log(f"{root}: left {len(keys) - len(keep)} images out of pretraining: copies of validation or test images")
    if not keep:
        raise ZooError(f"{root}: every image is a copy of a validation or test image of eval_data")
    return x[keep], [keys[i] for i in keep]


def load_data(cfg, run) -> SSLData:
    if cfg.eval_data:
        if not Path(cfg.data).exists():
            raise ZooError(f"data={cfg.data}: folder not found (with eval_data, data is a folder of unlabelled images)")
        x, keys = load_unlabelled_folder(Path(cfg.data), cfg.image_size, run.log)
        if not cfg.image_size:
            run.report("image_size", x.shape[-1])
        # evaluated at the pretraining images' size and channels: the backbone sees one kind of input
        splits = load_folder_splits(Path(cfg.eval_data), x.shape[-1], cfg.val_fraction, cfg.test_fraction, run.log,
                                    labels=image_tables.labels_table(cfg))
        if x.shape[1] != splits.train_x.shape[1]:  # grey repeated to three channels, as PIL converts it
            run.log(f"{cfg.data if x.shape[1] == 1 else cfg.eval_data}: greyscale images converted to RGB (the "
                    "other folder is colour)")
            x, splits.train_x, splits.val_x, splits.test_x = (t.expand(-1, 3, -1, -1).contiguous() for t in
                                                              (x, splits.train_x, splits.val_x, splits.test_x))
        x, keys = without_held_out(x, keys, splits, run.log, cfg.data)
        run.log(f"{cfg.data}: {len(x)} unlabelled images for pretraining")
        return SSLData(x, splits, keys)
    splits = load_image_splits(cfg.data, cfg.image_size, cfg.val_fraction, cfg.test_fraction, run,
                               labels=image_tables.labels_table(cfg))
    return SSLData(splits.train_x, splits, splits.keys["train"])  # train minus validation: labels never read


# =============================================================================================
# Two views per image (kornia: per-image random parameters on whole batches, on the run's device)
# =============================================================================================

# view_size=-1 for SimCLR: views cropped to 3/4 of the image side train more steps a second, and the evaluation's
# whole images then show objects nearer the size training saw (FixRes's train-test resolution effect); chosen on
# validation kNN: docs/LOG.md#2026-12-06-simclr-views-at-3-4-of-the-side
VIEW_SHARE = 0.75


def resolve_auto(cfg, data: SSLData):
    size = data.pretrain_x.shape[-1]
    flip = cfg.flip if cfg.flip != "auto" else default_flip(data.eval.name)
    crop_min = cfg.crop_min if cfg.crop_min > 0 else (0.2 if size >= 16 else 0.5)
    blur = cfg.blur if cfg.blur >= 0 else (0.5 if size > 32 else 0.0)
    view = cfg.view_size if cfg.view_size > 0 else size
    if cfg.view_size == -1 and cfg.method == "simclr" and size >= 16:
        view = round(size * VIEW_SHARE)
    return dataclasses.replace(cfg, flip=flip, crop_min=crop_min, blur=blur, view_size=view)


def blur_kernel(size: int) -> int:
    """About a tenth of the image side, odd, at least 3."""
    return max(3, (size // 10) | 1)


def build_augment(cfg, channels: int, size: int) -> nn.Module:
    """Random resized crop, flip, colour jitter, greyscale and blur, each drawn per image."""
    import kornia.augmentation as K

    ops: list[nn.Module] = [K.RandomResizedCrop((size, size), scale=(cfg.crop_min, 1.0))]
    if cfg.flip == "on":
        ops.append(K.RandomHorizontalFlip())
    if cfg.color > 0:
        s = cfg.color
        colour = channels == 3  # saturation and hue need colour; grey images get brightness and contrast
        ops.append(K.ColorJitter(s, s, s if colour else 0.0, s / 4 if colour else 0.0, p=0.8))
    if cfg.grayscale > 0 and channels == 3:
        ops.append(K.RandomGrayscale(p=cfg.grayscale))
    if cfg.blur > 0:
        kernel = blur_kernel(size)
        ops.append(K.RandomGaussianBlur((kernel, kernel), (0.1, 2.0), p=cfg.blur))
    return nn.Sequential(*ops)


def describe_augment(cfg, channels: int, size: int, image_size: int | None = None) -> str:
    """``size``: the views' side; ``image_size``: the images', named when the views are cropped to another."""
    parts = [f"random resized crop (area {cfg.crop_min:g}-1)"]
    if cfg.flip == "on":
        parts.append("flip")
    if cfg.color > 0:
        parts.append(f"colour jitter {cfg.color:g} (p 0.8)" if channels == 3 else
                     f"brightness/contrast {cfg.color:g} (p 0.8)")
    if cfg.grayscale > 0 and channels == 3:
        parts.append(f"grey p {cfg.grayscale:g}")
    if cfg.blur > 0:
        parts.append(f"blur {blur_kernel(size)}px p {cfg.blur:g}")
    views = f"; {size} px views of the {image_size} px images" if image_size not in (None, size) else ""
    return ", ".join(parts) + views


def two_views(augment: nn.Module, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent augmentations of a [0, 1] float batch, replayable from ``seed``
    (kornia draws from the global RNG, pinned here to the batch's seed)."""
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return augment(x), augment(x)


# =============================================================================================
# Inference: the input scaling training used, and the evaluation splits rebuilt from the config
# =============================================================================================

def normalizer(mean: torch.Tensor, std: torch.Tensor, device, memory_format):
    """uint8 (N, C, H, W) batches -> the backbone's input: /255, then per-channel (x - mean) / std (the
    pretraining images' statistics), in the run's memory format. Returns (normalize, standardize): the latter
    for [0, 1] floats (the augmented views)."""
    mean, std = (t.view(1, -1, 1, 1).to(device) for t in (mean, std))

    def standardize(x01: torch.Tensor) -> torch.Tensor:
        return ((x01 - mean) / std).contiguous(memory_format=memory_format)

    def normalize(x_uint8: torch.Tensor) -> torch.Tensor:
        return standardize(to_device(x_uint8, device).float().div_(255))

    return normalize, standardize


def eval_splits(cfg, run) -> ImageSplits:
    """The labelled splits a run scored, loaded as training loaded them (at the pretraining images' size)."""
    data = load_data(cfg, run)
    splits = data.eval
    if splits.train_x.shape[-1] != data.pretrain_x.shape[-1]:
        resize_splits(splits, data.pretrain_x.shape[-1])
    return splits


def item_name(key) -> str:
    """An item's key as split.csv writes it: a path as it is, an in-memory image as the start of its sha256."""
    import hashlib

    return hashlib.sha256(key).hexdigest()[:16] if isinstance(key, bytes) else str(key)
