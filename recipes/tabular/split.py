"""Tabular splits: the test rows (the dataset's test file, or a ``split_seed`` split: the same for every
``--seed``), or ``folds`` over all rows; the rest split into training and validation rows by a hash of each row's
content (``recipe_zoo.core.splits.carve``): the same validation rows for every seed and any row order, and equal rows
on the same side. ``split.csv`` names rows by their number in the table as read (from 0, header not counted; adult:
adult.data's rows, then adult.test's)."""
from __future__ import annotations

import numpy as np

from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.splits import carve, carve_units
from recipe_zoo.recipes.tabular.config import TabularConfig
from recipe_zoo.recipes.tabular.data import Table


def stratify(table: Table, idx: np.ndarray):
    return table.y[idx] if table.task != "regression" else None


def enough_rows(table: Table, parts: int, what: str, rows: np.ndarray | None = None) -> None:
    """One line, not scikit-learn's ValueError, when the table (or its ``rows``) is too small to split into
    ``parts`` (stratified splits: each class in every part)."""
    y = table.y if rows is None else table.y[rows]
    n = len(y)
    if n < parts:
        raise ZooError(f"{table.name}: {n} {'training ' if rows is not None else ''}row{'s' if n != 1 else ''}, "
                       f"too few for {what}")
    if table.task != "regression":
        counts = np.bincount(y, minlength=len(table.classes))
        rare = int(np.argmin(counts))
        if counts[rare] < parts:
            raise ZooError(f"{table.name}: class {table.classes[rare]!r} has {counts[rare]} row"
                           f"{'s' if counts[rare] != 1 else ''}; {what}, stratified, needs {parts} of each class")


def test_split(table: Table, cfg: TabularConfig) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows): the given test file, or a split_seed split (stratified for classes)."""
    from sklearn.model_selection import train_test_split

    n = len(table.y)
    if table.test_rows is not None:
        return np.setdiff1d(np.arange(n), table.test_rows), np.asarray(table.test_rows)
    if not 0 < cfg.test_size < 1:
        raise ZooError(f"test_size={cfg.test_size}: a fraction between 0 and 1")
    enough_rows(table, 2, f"a test split (test_size={cfg.test_size})")
    return tuple(train_test_split(np.arange(n), test_size=cfg.test_size, random_state=cfg.split_seed,
                                  stratify=stratify(table, np.arange(n))))


def fold_splits(table: Table, cfg: TabularConfig):
    from sklearn.model_selection import KFold, StratifiedKFold

    if cfg.folds < 2:
        raise ZooError(f"folds={cfg.folds}: cross-validation needs at least 2 folds")
    n = len(table.y)
    enough_rows(table, cfg.folds, f"folds={cfg.folds}")
    kind = KFold if table.task == "regression" else StratifiedKFold
    return list(kind(cfg.folds, shuffle=True, random_state=cfg.split_seed).split(np.zeros(n), stratify(table, np.arange(n))))


def carve_validation(table: Table, train: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows) of ``train``: a row is validation when the hash of its content falls below
    ``fraction`` (``splits.carve``): the same rows for every seed and row order, and copies of a row on one side."""
    if not 0 < fraction < 1:
        raise ZooError(f"val_fraction={fraction}: a fraction between 0 and 1")
    units = getattr(table, "units", None)  # a streamed table keeps each row's hash, not its content
    held = carve([table.keys[i] for i in train], fraction) if units is None else carve_units(units[train], fraction)
    if held.all() or not held.any():
        raise ZooError(f"{table.name}: {len(train)} training row{'s' if len(train) != 1 else ''} leave "
                       f"{'no training' if held.all() else 'no validation'} rows at val_fraction={fraction}; "
                       "more rows are needed")
    return train[~held], train[held]


def splits_for(cfg: TabularConfig, table: Table) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(training, validation, test) rows of each split. Folds: the validation rows are those of one carve over the
    whole table, so a row is validation in every fold that does not test it."""
    if not cfg.folds:
        train, test = test_split(table, cfg)
        return [(*carve_validation(table, np.asarray(train), cfg.val_fraction), np.asarray(test))]
    if table.test_rows is not None:
        raise ZooError(f"folds={cfg.folds}: {table.name} has its own test file; cross-validation would mix it in")
    _, held = carve_validation(table, np.arange(len(table.y)), cfg.val_fraction)
    is_val = np.zeros(len(table.y), dtype=bool)
    is_val[held] = True
    out = []
    for k, (train, test) in enumerate(fold_splits(table, cfg)):
        val = train[is_val[train]]
        if not len(val):
            raise ZooError(f"folds={cfg.folds}: fold {k} has no validation rows left ({len(table.y)} rows, "
                           f"val_fraction={cfg.val_fraction}); use fewer folds or a larger val_fraction")
        out.append((train[~is_val[train]], val, test))
    return out


def record_split(run, cfg: TabularConfig, table: Table, splits: list) -> None:
    """``split.csv`` (rows by number) and the split's one-line description. Folds: each row once, named by the fold
    that tests it, with ``validation`` when it is a validation row in the other folds."""
    if len(splits) == 1:
        fit, val, test = splits[0]
        run.record_split({"train": table.rows[fit], "validation": table.rows[val], "test": table.rows[test]})
        where = (f"{table.name}'s test file" if table.test_rows is not None
                 else f"{cfg.test_size:g} of the rows by split_seed {cfg.split_seed}")
        run.report("split", f"test {len(test)} ({where}), validation {len(val)} ({cfg.val_fraction:g} of the rest by "
                            f"row content hash), train {len(fit)}")
        return
    parts, validation = {}, np.concatenate([val for _, val, _ in splits])
    for k, (_, _, test) in enumerate(splits):
        is_val = np.isin(test, validation)
        parts[f"fold{k}"] = table.rows[test[~is_val]]
        parts[f"fold{k} validation"] = table.rows[test[is_val]]
    run.record_split(parts)
    run.report("split", f"{len(splits)}-fold by split_seed {cfg.split_seed} ({len(table.y)} rows, each fold's test "
                        f"~{len(splits[0][2])}); validation {cfg.val_fraction:g} of the rows by row content hash "
                        f"(~{len(splits[0][1])} a fold), the same rows in every fold that does not test them")
