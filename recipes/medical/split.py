"""The split of a medical dataset's cases: train / validation / test, or k folds each with an inner validation,
by a hash of each case's key (its path in the data, or the scene's name): fixed by the cases alone, never by the
seed or their order; and the doctor's view of a split's cases.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.splits import hash_unit
from recipe_zoo.recipes.medical.data import RawCase, SegData


@dataclass
class Fold:
    train: list[RawCase]  # what the network trains on and the plan reads
    val: list[RawCase]  # every evaluation during training, and val_dice
    test: list[RawCase]  # scored once, after training
    unused: list[RawCase] = field(default_factory=list)  # training cases left out by train_cases (a low-data run)


def hash_order(keys: list[str], salt: str) -> list[str]:
    """The keys ordered by their hash: an order fixed by the keys alone (not their input order, not the seed)."""
    return sorted(keys, key=lambda k: (hash_unit(k, salt), k))


def hold_out(keys: list[str], fraction: float, salt: str, where: str) -> tuple[list[str], list[str]]:
    """(kept, held out): the ``fraction`` of the keys (rounded down, at least one) with the lowest hashes held
    out; an exact count rather than a threshold, since a few dozen cases would leave the size to chance."""
    n = max(1, int(fraction * len(keys)))
    if n >= len(keys):
        raise ZooError(f"{where}: holding out {fraction:.0%} of {len(keys)} cases leaves none to train on")
    held = set(hash_order(keys, salt)[:n])
    return sorted(k for k in keys if k not in held), sorted(held)


def split_keys(keys: list[str], folds: int, val_fraction: float, test_fraction: float,
               where: str = "data") -> list[tuple[list[str], list[str], list[str]]]:
    """(train, validation, test) keys: one split (``folds=0``: test, then validation out of the rest), or k
    folds of the hash order as test sets, each with an inner validation of its other cases (salted per fold,
    so every case is trained on in some fold)."""
    if folds == 0:
        rest, test = hold_out(keys, test_fraction, "test", where)
        return [(*hold_out(rest, val_fraction, "validation", where), test)]
    order = hash_order(keys, "fold")
    parts = []
    for k in range(folds):
        test = sorted(key for i, key in enumerate(order) if i * folds // len(order) == k)
        held = set(test)
        rest = sorted(key for key in keys if key not in held)
        parts.append((*hold_out(rest, val_fraction, f"validation-fold{k}", where), test))
    return parts


def split_cases(data: SegData, folds: int, val_fraction: float, test_fraction: float,
                train_cases: int = 0) -> list[Fold]:
    """The folds (one for ``folds=0``); ``folds=-1``: the dataset's own choice (``SegData.folds``).
    ``train_cases``: each fold trains on only that many of its training cases, the first in a hash order of their
    own (the low-data case; validation and test stay as they were); 0 = all."""
    n = len(data.cases)
    folds = data.folds if folds == -1 else folds
    if folds < 0 or folds == 1 or folds > n:
        raise ZooError(f"folds={folds}: use 0 (one train/validation/test split), -1 (auto) or 2..{n} (the cases)")
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 1:
            raise ZooError(f"{name}={value}: must be between 0 and 1")
    if n < 3 or (folds and n - math.ceil(n / folds) < 2):
        raise ZooError(f"{data.name}: {n} cases are too few to train, validate and test on (at least 3, and "
                       "2 outside each fold)")
    by_key = {c.key: c for c in data.cases}
    if len(by_key) < n:
        raise ZooError(f"{data.name}: two cases share a key ({n - len(by_key)} duplicate image paths)")
    parts = split_keys(list(by_key), folds, val_fraction, test_fraction, data.name)
    if train_cases:
        short = min(len(train) for train, _, _ in parts)
        if train_cases > short:
            raise ZooError(f"train_cases={train_cases}: {data.name}'s folds have {short} training cases at the "
                           "fewest; give at most that (0 = all)")
        orders = [hash_order(train, f"few-fold{k}") for k, (train, _, _) in enumerate(parts)]
        parts = [(sorted(order[:train_cases]), val, test, sorted(order[train_cases:]))
                 for order, (_, val, test) in zip(orders, parts)]
    return [Fold(*([by_key[k] for k in keys] for keys in part)) for part in parts]


def inspect_view(*splits: list[RawCase]) -> list[tuple]:
    """``run.inspect``'s (inputs, labels) per split: the images stacked when every case shares one shape, else
    one content digest per case (exact duplicates still match across splits); the labels as all their voxels."""
    import hashlib

    def digest(image: np.ndarray) -> str:
        h = hashlib.blake2b(str(image.shape).encode(), digest_size=12)
        h.update(np.ascontiguousarray(image))
        return h.hexdigest()

    same = len({c.image.shape for split in splits for c in split}) == 1
    return [(np.stack([c.image for c in split]) if same else [digest(c.image) for c in split],
             np.concatenate([c.label.ravel() for c in split])) for split in splits]
