"""A protein set as the recipes hold it (``ProteinData``: sequences or embeddings, labels, the split) and what every
reader checks: a sequence's letters and length, labels read as numbers or as classes."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.protein.config import ProteinConfig


AMINO = "ACDEFGHIKLMNPQRSTVWY"
EXTRA = "XBZUO"  # unknown, ambiguous (B, Z), selenocysteine, pyrrolysine: in ESM's alphabet too


@dataclass
class ProteinData:
    name: str
    y: np.ndarray  # (n,) float targets, or class indices for classification
    task: str  # regression | classification
    seqs: list[str] | None = None
    emb: np.ndarray | None = None  # precomputed embeddings (NPZ input)
    classes: list[str] | None = None
    split: tuple | None = None  # fixed (train, validation, test) indices, when the data defines them
    split_text: str = ""  # what the split is, for the run's summary
    keys: list | None = None  # each item's split key: its sequence (an NPZ row: its embedding's bytes)
    uncropped: list[str] | None = None  # the sequences before too_long=crop: what the split hashes
    positions: list[tuple[int, ...]] | None = None  # the mutated positions of each item, where the data says them
    skipped: int = 0
    ids: list[str] | None = None  # each item's name for predictions.csv: its FASTA header, or its CSV mutant
    reference: str | None = None  # the consensus the positions were read against (variant sequences, no mutant column)


def check_sequence(seq: str, where: str, cfg: ProteinConfig, crop: bool = True) -> str:
    """Upper-cased, letters checked against the alphabet, length against max_len (cropped, or with ``crop=False``
    left whole for the caller to crop)."""
    seq = re.sub(r"\s+", "", seq).upper()
    if not seq:
        raise ZooError(f"{where}: empty sequence")
    bad = next((i for i, a in enumerate(seq) if a not in AMINO and a not in EXTRA), None)
    if bad is not None:
        raise ZooError(f"{where}: unknown amino-acid letter {seq[bad]!r} at position {bad + 1} "
                       f"(expected the 20 standard letters or {', '.join(EXTRA)})")
    if len(seq) > cfg.max_len:
        if cfg.too_long == "error":
            raise ZooError(f"{where}: {len(seq)} residues, longer than max_len={cfg.max_len} (ESM-2 was trained "
                           "on 1,022); set too_long=crop to keep the first max_len residues")
        seq = seq[:cfg.max_len] if crop else seq
    return seq


def parse_labels(labels: list[str], where: list[str], task: str) -> tuple[np.ndarray, str, list[str] | None]:
    """Numbers for regression, class indices (sorted names) for classification; NaN is an error."""
    numbers = []
    for text, w in zip(labels, where):
        try:
            numbers.append(float(text))
        except ValueError:
            numbers.append(None)
    numeric = all(v is not None for v in numbers)
    words = [i for i, v in enumerate(numbers) if v is None]
    if task == "auto" and words and 2 * len(words) <= len(labels):  # a typo among numbers more often than a class
        i = words[0]
        raise ZooError(f"{where[i]}: target {labels[i]!r} is not a number ({len(words)} of {len(labels)} labels "
                       "are not numbers); fix them, or set task=classification if they are class names")
    if task == "auto":
        task = "classification" if not numeric or set(numbers) <= {0.0, 1.0} else "regression"
    if task == "regression":
        for v, text, w in zip(numbers, labels, where):
            if v is None or not math.isfinite(v):
                raise ZooError(f"{w}: target {text!r} is not a finite number")
        return np.array(numbers, dtype=np.float64), task, None
    for text, w in zip(labels, where):
        if text.strip().lower() in ("", "nan", "na"):
            raise ZooError(f"{w}: missing class label {text!r}")
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise ZooError(f"{where[0].split(':')[0]}: classification needs at least 2 classes, found {classes}")
    index = {c: i for i, c in enumerate(classes)}
    return np.array([index[t] for t in labels], dtype=np.int64), task, classes
