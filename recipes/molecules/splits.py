"""Seeded train / validation / test splits of the molecules, random or by Bemis-Murcko scaffold (whole scaffold
groups to one part), and k folds of them (fold i tests, fold i+1 validates). Three parts, as chemprop splits: the
split is drawn with the run's seed, so the mean over seeds is a mean over splits.
"""
from __future__ import annotations

import numpy as np

from recipe_zoo.core.errors import ZooError


def parse_sizes(text: str) -> tuple[float, float, float]:
    try:
        sizes = tuple(float(v) for v in text.split(","))
    except ValueError:
        sizes = ()
    if len(sizes) != 3 or any(s < 0 for s in sizes) or abs(sum(sizes) - 1) > 1e-6 or sizes[0] == 0:
        raise ZooError(f"split_sizes={text!r}: give three fractions that sum to 1, e.g. 0.8,0.1,0.1")
    return sizes


def scaffolds(mols: list) -> list[str]:
    from rdkit.Chem.Scaffolds import MurckoScaffold

    return [MurckoScaffold.MurckoScaffoldSmiles(mol=m, includeChirality=False) for m in mols]


def scaffold_groups(mols: list) -> list[list[int]]:
    """Molecule indices grouped by Bemis-Murcko scaffold, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(scaffolds(mols)):
        groups.setdefault(s, []).append(i)
    return list(groups.values())


def split_indices(mols: list, kind: str, sizes: tuple[float, float, float], seed: int):
    """Train/validation/test indices. Scaffold: whole Bemis-Murcko groups go to one part; groups larger
    than half the test size go to train first, the rest in seeded random order (balanced scaffold split)."""
    n = len(mols)
    rng = np.random.default_rng(seed)
    n_train, n_val = int(round(sizes[0] * n)), int(round(sizes[1] * n))
    if kind == "random":
        order = rng.permutation(n)
        return order[:n_train], order[n_train:n_train + n_val], order[n_train + n_val:]
    sets = scaffold_groups(mols)
    big = [g for g in sets if len(g) > sizes[2] * n / 2]
    small = [g for g in sets if len(g) <= sizes[2] * n / 2]
    rng.shuffle(big)
    rng.shuffle(small)
    train, val, test = [], [], []
    for g in sorted(big, key=len, reverse=True) + small:
        if len(train) + len(g) <= n_train:
            train += g
        elif len(val) + len(g) <= n_val:
            val += g
        else:
            test += g
    if not val or not test:
        raise ZooError(f"the scaffold split left the {'validation' if not val else 'test'} set empty: {len(sets)} "
                       "scaffolds are too few to split by; use split=random or more molecules")
    return np.array(train, dtype=np.int64), np.array(val, dtype=np.int64), np.array(test, dtype=np.int64)


def fold_indices(mols: list, kind: str, folds: int, seed: int):
    """k (train, validation, test) splits: fold i is test, fold i+1 validation; scaffold groups stay whole."""
    if folds < 3:
        raise ZooError(f"folds={folds}: cross-validation needs at least 3 folds (test, validation, train)")
    rng = np.random.default_rng(seed)
    if kind == "random":
        units = [[i] for i in rng.permutation(len(mols))]
    else:
        units = scaffold_groups(mols)
        rng.shuffle(units)
        units.sort(key=len, reverse=True)  # largest groups first, each to the currently smallest fold
    assigned: list[list[int]] = [[] for _ in range(folds)]
    for unit in units:
        min(assigned, key=len).extend(unit)
    for k in range(folds):
        test, val = assigned[k], assigned[(k + 1) % folds]
        train = [i for j, f in enumerate(assigned) if j not in (k, (k + 1) % folds) for i in f]
        yield np.array(train, dtype=np.int64), np.array(val, dtype=np.int64), np.array(test, dtype=np.int64)
