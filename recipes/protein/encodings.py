"""Sequences as features for protein/onehot: each position one-hot (21 letters) or its BLOSUM62 row."""
from __future__ import annotations

import functools

import numpy as np

from recipe_zoo.recipes.protein.sequences import AMINO


# BLOSUM62 (Henikoff & Henikoff 1992, PNAS 89:10915; the NCBI matrix file), rows and columns in AMINO's order, then
# X's row (any other letter) over the 20
_BLOSUM62 = """
 4  0 -2 -1 -2  0 -2 -1 -1 -1 -1 -2 -1 -1 -1  1  0  0 -3 -2
 0  9 -3 -4 -2 -3 -3 -1 -3 -1 -1 -3 -3 -3 -3 -1 -1 -1 -2 -2
-2 -3  6  2 -3 -1 -1 -3 -1 -4 -3  1 -1  0 -2  0 -1 -3 -4 -3
-1 -4  2  5 -3 -2  0 -3  1 -3 -2  0 -1  2  0  0 -1 -2 -3 -2
-2 -2 -3 -3  6 -3 -1  0 -3  0  0 -3 -4 -3 -3 -2 -2 -1  1  3
 0 -3 -1 -2 -3  6 -2 -4 -2 -4 -3  0 -2 -2 -2  0 -2 -3 -2 -3
-2 -3 -1  0 -1 -2  8 -3 -1 -3 -2  1 -2  0  0 -1 -2 -3 -2  2
-1 -1 -3 -3  0 -4 -3  4 -3  2  1 -3 -3 -3 -3 -2 -1  3 -3 -1
-1 -3 -1  1 -3 -2 -1 -3  5 -2 -1  0 -1  1  2  0 -1 -2 -3 -2
-1 -1 -4 -3  0 -4 -3  2 -2  4  2 -3 -3 -2 -2 -2 -1  1 -2 -1
-1 -1 -3 -2  0 -3 -2  1 -1  2  5 -2 -2  0 -1 -1 -1  1 -1 -1
-2 -3  1  0 -3  0  1 -3  0 -3 -2  6 -2  0  0  1  0 -3 -4 -2
-1 -3 -1 -1 -4 -2 -2 -3 -1 -3 -2 -2  7 -1 -2 -1 -1 -2 -4 -3
-1 -3  0  2 -3 -2  0 -3  1 -2  0  0 -1  5  1  0 -1 -2 -2 -1
-1 -3 -2  0 -3 -2  0 -3  2 -2 -1  0 -2  1  5 -1 -1 -3 -3 -2
 1 -1  0  0 -2  0 -1 -2  0 -2 -1  1 -1  0 -1  4  1 -2 -3 -2
 0 -1 -1 -1 -2 -2 -2 -1 -1 -1 -1  0 -1 -1 -1  1  5  0 -2 -2
 0 -1 -3 -2 -1 -3 -3  3 -2  1  1 -3 -2 -2 -3 -2  0  4 -3 -1
-3 -2 -4 -3  1 -2 -2 -3 -3 -2 -1 -4 -4 -2 -3 -3 -2 -3 11  2
-2 -2 -3 -2  3 -3  2 -1 -2 -1 -1 -2 -3 -1 -2 -2 -2 -1  2  7
 0 -2 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -2 -1 -1  0  0 -1 -2 -1
"""


@functools.cache
def blosum62() -> np.ndarray:
    """(21, 20): BLOSUM62 rows of the 20 amino acids over the 20, plus X's row for the other letters; / 4."""
    return np.array([row.split() for row in _BLOSUM62.strip().splitlines()], dtype=np.float32) / 4


def encode(seqs: list[str], kind: str, length: int = 0) -> np.ndarray:
    """(n, length x 21) one-hot (letters beyond the 20 share a column) or (n, length x 20) BLOSUM62;
    positions are compared as given (variants of one protein), shorter sequences padded with zeros. ``length``:
    the training's (predict), residues past it dropped: in training those columns were all padding, so unused."""
    length = length or max(len(s) for s in seqs)
    lookup = {a: i for i, a in enumerate(AMINO)}
    idx = np.full((len(seqs), length), -1, dtype=np.int64)
    for i, s in enumerate(seqs):
        idx[i, :min(len(s), length)] = [lookup.get(a, 20) for a in s[:length]]
    table = np.concatenate([np.eye(21, dtype=np.float32) if kind == "onehot" else blosum62(),
                            np.zeros((1, 21 if kind == "onehot" else 20), dtype=np.float32)])
    return table[idx].reshape(len(seqs), -1)  # index -1 picks the zero row: padding
