"""What both recipes do first: the table read and logged (the run's metric set by its task), the run's splits made
with its seed and recorded in ``split.csv`` by canonical SMILES, and the first split's training and validation
molecules shown to ``zoo doctor``.
"""
from __future__ import annotations

import numpy as np

from recipe_zoo.recipes.molecules.config import MolConfig
from recipe_zoo.recipes.molecules.scoring import primary_metric
from recipe_zoo.recipes.molecules.splits import fold_indices, parse_sizes, split_indices
from recipe_zoo.recipes.molecules.table import MolTable, parent_smiles, read_table, without


def run_splits(cfg: MolConfig, table: MolTable, seed: int):
    if cfg.folds:
        return list(fold_indices(table.split_mols, cfg.split, cfg.folds, seed))
    return [split_indices(table.split_mols, cfg.split, parse_sizes(cfg.split_sizes), seed)]


def record_split(run, cfg: MolConfig, table: MolTable, splits: list) -> None:
    """``split.csv`` by canonical SMILES and the split's one-line description. Folds: each molecule once, named by
    the fold that tests it (fold k's validation molecules are those fold k+1 tests)."""
    smiles = np.array(parent_smiles(table), dtype=object)
    kind = "Bemis-Murcko scaffold" if cfg.split == "scaffold" else "random"
    if len(splits) == 1:
        train, val, test = splits[0]
        run.record_split({"train": smiles[train], "validation": smiles[val], "test": smiles[test]})
        run.report("split", f"{kind} {cfg.split_sizes} by the run's seed: train {len(train)}, validation "
                            f"{len(val)}, test {len(test)}")
        return
    run.record_split({f"fold{k}": smiles[test] for k, (_, _, test) in enumerate(splits)})
    run.report("split", f"{len(splits)}-fold {kind} by the run's seed ({len(table.mols)} molecules): each fold's test "
                        f"~{len(splits[0][2])}, validation the next fold's (~{len(splits[0][1])})")


def load_for(cfg: MolConfig, run) -> MolTable:
    table = read_table(cfg)
    metric, higher = primary_metric(table.task)
    run.set_metric(f"test_{metric}", higher)
    if table.skipped:
        run.log(f"{table.name}: {table.skipped} rows with unparsable molecules skipped ({table.skipped_at})")
        run.report("invalid_smiles_skipped", table.skipped)
    if cfg.exclude:
        table, dropped = without(table, cfg.exclude)
        run.log(f"exclude={cfg.exclude}: {dropped} of {table.name}'s {len(table.mols) + dropped} molecules are in it "
                f"and left out")
        run.report("excluded_molecules", dropped)
    run.log(f"{table.name}: {len(table.mols)} molecules, {table.task}, targets {', '.join(table.targets)}; "
            f"{'k-fold ' + str(cfg.folds) if cfg.folds else cfg.split_sizes} {cfg.split} split")
    return table


def splits_for(cfg: MolConfig, table: MolTable, run) -> list:
    """The run's (train, validation, test) splits, recorded in ``split.csv``."""
    splits = run_splits(cfg, table, run.seed)
    record_split(run, cfg, table, splits)
    return splits


def inspect_split(run, table: MolTable, split, loop: bool, fine_tune: bool | tuple = False) -> None:
    """The first split's training and validation molecules for ``zoo doctor`` (never the test ones): canonical SMILES
    of the standardised molecules (a duplicate is the same molecule however written, salts stripped); one target
    only (several targets have gaps the loss masks). ``fine_tune``: started from a run (a tuple names new tensors),
    for the doctor's weight-change check."""
    if not run.inspecting:
        return
    smiles = parent_smiles(table)
    y = table.y[:, 0] if table.y.shape[1] == 1 else None

    def rows(idx: np.ndarray) -> tuple:
        return ([smiles[i] for i in idx],) + ((y[idx],) if y is not None else ())

    run.inspect(train=rows(split[0]), val=rows(split[1]), task=table.task,
                num_classes=2 if table.task == "classification" else None, loop=loop, fine_tune=fine_tune)
