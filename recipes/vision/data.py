"""Vision's own data steps: settings that depend on the data, the decoded arrays ``zoo data prepare vision/resnet``
writes, augmentation of whole uint8 batches on the fly, and MixUp/CutMix. ``cfg`` is the recipe's config
(``VisionConfig`` in ``resnet.py``)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
import torch.nn.functional as F

from recipe_zoo.core import prepared
from recipe_zoo.recipes import image_tables
from recipe_zoo.recipes.image_splits import ImageSplits
from recipe_zoo.recipes.image_streams import PREPARED_FIELDS, default_workers, write_prepared
from recipe_zoo.recipes.images import default_flip, load_image_splits

# =============================================================================================
# Settings that depend on the data
# =============================================================================================

def resolve_auto(cfg, data: ImageSplits):
    """Augmentations that depend on the data: no flips for handwritten digits (a flipped digit is
    another symbol), translation by an eighth of the image side (4 px at 32 px)."""
    flip = cfg.flip if cfg.flip != "auto" else default_flip(data.name)
    pad = cfg.crop_pad if cfg.crop_pad >= 0 else max(1, data.train_x.shape[-1] // 8)
    return dataclasses.replace(cfg, flip=flip, crop_pad=pad)


# =============================================================================================
# Prepared arrays (zoo data prepare): the images decoded once, at the run's size
# =============================================================================================

def prepare_images(cfg, run, out: Path | None = None, force: bool = False) -> Path:
    """``zoo data prepare vision/resnet data=SOURCE [image_size=N] ...``: the decoded arrays, made once."""
    return prepared.ensure(cfg, run, kind="images", fields=PREPARED_FIELDS, recipe="vision/resnet", out=out,
                           force=force, make=lambda folder: _write_images(cfg, run, folder))


def _write_images(cfg, run, folder: Path) -> dict:
    data = load_image_splits(cfg.data, cfg.image_size, cfg.val_fraction, cfg.test_fraction, run, stream=True,
                             labels=image_tables.labels_table(cfg))
    return write_prepared(data, folder, default_workers(getattr(cfg, "workers", -1)),
                          run.progress if hasattr(run, "progress") else None)


# =============================================================================================
# Augmentation, on whole uint8 batches
# =============================================================================================

def random_translate(x: torch.Tensor, pad: int, g: torch.Generator) -> torch.Tensor:
    """Shift each image by up to ``pad`` pixels, filling by reflection (random crop of the padded image)."""
    n, _, h, w = x.shape
    padded = F.pad(x.float(), (pad, pad, pad, pad), mode="reflect").to(x.dtype)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=g, device=g.device).tolist()
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=g, device=g.device).tolist()
    return torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])


def random_flip(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    mask = torch.rand(x.shape[0], generator=g, device=g.device) < 0.5
    return torch.where(mask.view(-1, 1, 1, 1).to(x.device), x.flip(-1), x)


def randaugment(x: torch.Tensor, ops: int, g: torch.Generator) -> torch.Tensor:
    from torchvision.transforms import v2

    aug = v2.RandAugment(num_ops=ops)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g, device=g.device))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # torchvision draws from the global RNG: pin it to this batch's seed
        return torch.stack([aug(img) for img in x])


def augment(batch, g: torch.Generator, cfg):
    x, y = batch
    if cfg.crop_pad:
        x = random_translate(x, cfg.crop_pad, g)
    if cfg.flip == "on":
        x = random_flip(x, g)
    if cfg.randaugment:
        x = randaugment(x, cfg.randaugment, g)
    return x, y


def mix(x: torch.Tensor, y: torch.Tensor, num_classes: int, cfg) -> tuple[torch.Tensor, torch.Tensor]:
    """MixUp or CutMix (chosen at random when both are on); returns soft targets."""
    from torchvision.transforms import v2

    choices = [t for t, a in ((v2.MixUp, cfg.mixup), (v2.CutMix, cfg.cutmix)) if a > 0]
    alphas = [a for a in (cfg.mixup, cfg.cutmix) if a > 0]
    k = int(torch.randint(len(choices), (1,)))
    return choices[k](alpha=alphas[k], num_classes=num_classes)(x, y)


# =============================================================================================
# Predictions, one row per image
# =============================================================================================

def test_names(data: ImageSplits) -> list[str]:
    """The test images' names: their paths in the folder (in-memory datasets: their index)."""
    return [k if isinstance(k, str) else str(i) for i, k in enumerate(data.keys.get("test", range(len(data.test_y))))]


def prediction_rows(logits: torch.Tensor, names: list[str], classes: list[str], labels=None) -> list[dict]:
    probs = logits.float().softmax(1).cpu()
    rows = []
    for i, name in enumerate(names):
        row = {"file": name} | ({"label": classes[int(labels[i])]} if labels is not None else {})
        rows.append(row | {"predicted": classes[int(probs[i].argmax())]}
                    | {f"p_{c}": float(probs[i, k]) for k, c in enumerate(classes)})
    return rows
