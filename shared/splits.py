"""Splits that selection can trust: which side of a split an item falls on is a function of the item alone.

A validation set carved from a training set by a hash of each item's key (a path, a row's content, a sequence)
keeps every item on the same side on any machine, in any order, and in a stream; items with the same content
share a side, so a duplicate never straddles training and validation. ``record_split`` writes who went where
into the run directory (``split.csv``), so a result can be checked against its data.
"""
from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np


def hash_unit(key: str | bytes, salt: str = "validation") -> float:
    """A number in [0, 1) fixed by ``key`` and ``salt`` (sha256): the item's place along every split."""
    data = key if isinstance(key, bytes) else str(key).encode()
    digest = hashlib.sha256(salt.encode() + b"\0" + data).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def content_key(row) -> bytes:
    """The key of an item known only by its content (an image array, a table row): its bytes."""
    return np.ascontiguousarray(row).tobytes()


def carve(keys: Sequence, fraction: float, salt: str = "validation") -> np.ndarray:
    """Boolean mask, True for the items held out: those whose ``hash_unit`` falls below ``fraction``. With two
    distinct keys or more, at least one key is held out and one kept (the lowest and the highest hash, with all
    their copies: copies of an item always share a side)."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction {fraction}: must be in (0, 1)")
    return carve_units(np.array([hash_unit(k, salt) for k in keys], dtype=np.float64), fraction)


def carve_units(units: np.ndarray, fraction: float) -> np.ndarray:
    """``carve`` on items' ``hash_unit`` values already computed (a streamed table keeps them as its rows go by)."""
    held = units < fraction
    if len(np.unique(units)) >= 2:
        if not held.any():
            held = units == units.min()
        if held.all():
            held = units != units.max()
    return held


def record_split(path: Path, parts: dict[str, Iterable]) -> None:
    """``split.csv`` in the run directory: one line per item (its key) and the split it belongs to."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["item", "split"])
        for split, keys in parts.items():
            writer.writerows((readable_key(key), split) for key in keys)


def readable_key(key) -> str:
    """A path or row name as it is; an item known by its content as the start of its sha256."""
    return hashlib.sha256(key).hexdigest()[:16] if isinstance(key, bytes) else str(key)
