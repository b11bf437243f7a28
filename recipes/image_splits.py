"""Labelled images split train / validation / test, for the image domains (vision, contrastive, diffusion): the
``ImageSplits`` they all train and score on, and the ways a set of images is cut into its parts (by a hash of each
item's key, or a fixed test part with validation carved from the rest).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from recipe_zoo.core import splits
from recipe_zoo.core.errors import ZooError

PARTS = ("train", "validation", "test")


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


def keep_classes(data: ImageSplits, names: str, what: str, log=print) -> ImageSplits:
    """Only the images of the classes ``names`` lists (comma-separated class names), in every part, labelled in
    the data's class order; how many images each part kept is logged and added to ``how``. A name that is not a
    class of ``what`` is one line naming the classes there are."""
    wanted = [c.strip() for c in names.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in data.classes]
    if unknown or len(set(wanted)) != len(wanted) or not wanted:
        problem = f"{unknown[0]!r} is not a class of {what}" if unknown else "each class once, at least one"
        raise ZooError(f"classes={names}: {problem} (its classes: {', '.join(data.classes)})")
    kept = [c for c in data.classes if c in wanted]
    relabel = torch.full((len(data.classes),), -1, dtype=torch.long)
    relabel[[data.classes.index(c) for c in kept]] = torch.arange(len(kept))
    tensors, keys, counts = [], {}, []
    for part, short in zip(PARTS, ("train", "val", "test")):
        x, y = getattr(data, f"{short}_x"), getattr(data, f"{short}_y")
        idx = torch.nonzero(relabel[y] >= 0).flatten()
        if len(idx) == 0:
            raise ZooError(f"classes={names}: no {part} images of these classes in {what}")
        tensors += [x[idx], relabel[y[idx]]]
        if part in data.keys:
            keys[part] = [data.keys[part][i] for i in idx.tolist()]
        counts.append(f"{len(idx)} of {len(y)} {part}")
    line = f"classes {', '.join(kept)} only: {', '.join(counts)} images kept"
    log(f"{what}: {line}")
    return ImageSplits(*tensors, kept, data.name, keys=keys, how=f"{data.how}; {line}")
