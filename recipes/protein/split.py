"""Protein splits: which side of train / validation / test an item falls on is a function of its key alone (its
sequence; an NPZ row: its embedding's bytes) or, with split=positions, of its mutated positions (a hash of each
position): the same on any machine, for any seed and any order of the input; items that share a key share a side."""
from __future__ import annotations

from collections import Counter

import numpy as np

from recipe_zoo.core import splits
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.protein.sequences import ProteinData


def parse_sizes(text: str) -> tuple[float, float, float]:
    try:
        sizes = tuple(float(v) for v in text.split(","))
    except ValueError:
        sizes = ()
    if len(sizes) != 3 or any(s <= 0 for s in sizes) or abs(sum(sizes) - 1) > 1e-6:
        raise ZooError(f"split_sizes={text!r}: give three positive fractions that sum to 1, e.g. 0.8,0.1,0.1")
    return sizes


def item_keys(data: ProteinData) -> list:
    """Each item's split key: its whole sequence (before too_long=crop, so that max_len never moves an item between
    splits), or (an NPZ of embeddings) its embedding's bytes."""
    if data.seqs is None:
        return [splits.content_key(row) for row in data.emb]
    return list(data.uncropped if data.uncropped is not None else data.seqs)


def grouped_split(groups: list[list], sizes: tuple[float, float, float]):
    """(train, validation, test) row indices: each distinct group key goes to test or validation by its hash
    (``splits.carve``), and an item to test when one of its keys is a test key, else to validation when one is a
    validation key, else to train. Items that share a key share a side."""
    distinct = list(dict.fromkeys(k for g in groups for k in g))
    test_keys = {k for k, held in zip(distinct, splits.carve(distinct, sizes[2], salt="test")) if held}
    rest = [k for k in distinct if k not in test_keys]
    val_keys = ({k for k, held in zip(rest, splits.carve(rest, sizes[1] / (sizes[0] + sizes[1]))) if held}
                if len(rest) >= 2 else set())
    side = np.array([2 if any(k in test_keys for k in g) else 1 if any(k in val_keys for k in g) else 0
                     for g in groups])
    return tuple(np.where(side == s)[0] for s in range(3))


def hash_split(keys: list, sizes: tuple[float, float, float]):
    """A random split chosen by a hash of each item's key: the same on any machine, for any seed and order."""
    return grouped_split([[k] for k in keys], sizes)


def position_split(positions: list[tuple[int, ...]], sizes: tuple[float, float, float]):
    """Whole positions held out: every variant at a test position is in test (a multiple mutant touching one
    is too), positions chosen by a hash of the position."""
    return grouped_split([[f"position {p}" for p in pos] or ["wild type"] for pos in positions], sizes)


def esm_example_split(keys: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fair-esm supervised example's test set (train_test_split, 80/20, random_state=42), with 10% of
    its training rows held out for model selection by a hash of the sequence."""
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(np.arange(len(keys)), train_size=0.8, random_state=42)
    train = np.sort(train)
    distinct = list(dict.fromkeys(keys[i] for i in train))
    held = {k for k, h in zip(distinct, splits.carve(distinct, 0.1)) if h}
    is_val = np.array([keys[i] in held for i in train])
    return train[~is_val], train[is_val], np.sort(test)


def positions_of(data: ProteinData) -> list[tuple[int, ...]]:
    """The mutated positions of each item: as the data gives them (an NPZ 'pos' array, a CSV mutant column), else
    where each sequence differs from the consensus (the wild type of a mutational scan; equal lengths only)."""
    if data.positions is not None:
        return data.positions
    if data.seqs is None or len({len(s) for s in data.seqs}) != 1:
        raise ZooError(f"{data.name}: split=positions and protein/position-mean need each item's mutated "
                       "positions: a 'pos' array in the NPZ, a mutant column (mutant=) in the CSV, or variant "
                       "sequences of one length")
    letters = np.array([list(s) for s in data.seqs])
    consensus = np.array([Counter(col.tolist()).most_common(1)[0][0] for col in letters.T])  # ties: first seen
    data.reference = "".join(consensus.tolist())
    data.positions = [tuple(int(p) + 1 for p in np.where(row != consensus)[0]) for row in letters]
    return data.positions
