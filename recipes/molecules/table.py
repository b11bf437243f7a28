"""The molecules as both recipes read them: a MoleculeNet set (declared in ``datasets.py``) or an own CSV, its SMILES
parsed (rows that do not parse named, or skipped), its targets read (blank = missing), each molecule standardised by
RDKit; and the molecules as canonical SMILES, one spelling per molecule (``split.csv``, the feature cache's key).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core import datasets
from recipe_zoo.core.datafiles import column_list, not_utf8
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.molecules import datasets as _datasets  # noqa: F401  (declares the domain's datasets)
from recipe_zoo.recipes.molecules import records
from recipe_zoo.recipes.molecules.config import MolConfig


def moleculenet(name: str) -> dict | None:
    """What the recipes read of a MoleculeNet set (its SMILES column, its targets, how many of its rows are known
    not to parse); None for any other name (a CSV of the user's)."""
    if not datasets.is_dataset(name) or datasets.get(name).domain != "molecules":
        return None
    return datasets.get(name).info


@dataclass
class MolTable:
    name: str
    smiles: list[str]
    mols: list  # RDKit Mol objects: what the features read (standardised when cfg.standardize)
    y: np.ndarray  # (n, tasks) float, NaN where missing
    targets: list[str]
    task: str  # regression | classification
    skipped: int = 0  # rows dropped for unparsable SMILES
    skipped_at: str = ""  # the first of them as the file counts them ("row 7, row 12", "record 3 ('aspirin')")
    parents: list | None = None  # the standardised molecules whatever cfg.standardize (None: ``mols`` are)
    names: list[str] | None = None  # an SD file's record names (its molecules' ids in predictions.csv)

    @property
    def split_mols(self) -> list:
        """What the split groups by scaffold and ``split.csv`` names: the standardised parents, so that a method
        setting (``standardize``) never moves a molecule between train, validation and test."""
        return self.mols if self.parents is None else self.parents


def quiet_rdkit():
    from rdkit import RDLogger

    RDLogger.DisableLog("rdApp.*")  # parse failures are counted and reported by us, not printed


def read_table(cfg: MolConfig) -> MolTable:
    from rdkit import Chem

    quiet_rdkit()
    known = moleculenet(cfg.data)
    if known is not None:
        smiles_col, targets, known_bad = known["smiles"], list(known["targets"]), known["known_invalid"]
        path, name = datasets.locate(cfg.data), cfg.data
    else:
        path, smiles_col, targets, known_bad, name = Path(cfg.data).expanduser(), "smiles", [], 0, cfg.data
        if not path.is_file():
            raise ZooError(f"{cfg.data}: no such file ({records.READS}), and not a dataset name (see `zoo data "
                           "list`)")
    smiles_col = cfg.smiles or smiles_col
    targets = [t.strip() for t in cfg.target.split(",") if t.strip()] if cfg.target else targets
    try:
        found = records.read(path, smiles_col, cfg.sep, cfg.comment)
    except csv.Error as exc:
        raise ZooError(f"{path}: cannot read as delimited text ({exc})") from None
    columns, rows = found.columns, found.rows
    if not targets:
        raise ZooError(f"{path}: say which column to predict: target=COLUMN (columns: {column_list(columns)})")
    for col in [smiles_col, *targets]:
        if col not in columns:
            if found.names is not None:
                raise ZooError(f"{path}: no property {col!r} in its records (properties: "
                               f"{column_list(columns[2:]) or 'none'}); set target=")
            raise ZooError(f"{path}: no column {col!r} (columns: {column_list(columns)}); set smiles= / target=")
    if not rows:
        raise ZooError(f"{path}: no rows")
    y = np.full((len(rows), len(targets)), np.nan)
    for i, row in enumerate(rows):
        for j, col in enumerate(targets):
            text = (row[col] or "").strip()
            if text == "" or text.lower() in ("nan", "na"):
                continue  # missing: masked in the loss and the metrics
            try:
                y[i, j] = float(text)
            except ValueError:
                raise ZooError(f"{path} {found.where(i)}: target {col!r} is {text!r}, not a number") from None
            if not math.isfinite(y[i, j]):
                raise ZooError(f"{path} {found.where(i)}: target {col!r} is {text!r}")
    empty = np.where(np.isnan(y).all(axis=1))[0]
    if len(empty):
        raise ZooError(f"{path}: {len(empty)} rows have no target value (first: {found.where(empty[0])}); "
                       "remove them or fill them in")
    mols, bad = [], []
    for i, row in enumerate(rows):
        mol = Chem.MolFromSmiles((row[smiles_col] or "").strip())
        if mol is None or mol.GetNumAtoms() == 0:
            bad.append(i)
        mols.append(mol)
    skip = cfg.on_invalid == "skip" or (cfg.on_invalid == "auto" and known_bad and len(bad) == known_bad)
    if bad and not skip:
        if found.names is not None:  # an SD file: RDKit could not read those records' molecules
            raise ZooError(f"{path}: {len(bad)} of {len(rows)} records do not parse ({found.which(bad)}); fix them "
                           "or set on_invalid=skip")
        raise ZooError(f"{path}: {len(bad)} SMILES do not parse ({found.which(bad)}): {found.where(bad[0])} is "
                       f"{(rows[bad[0]][smiles_col] or '').strip()[:100]!r}; fix them or set on_invalid=skip")
    keep = [i for i in range(len(rows)) if i not in set(bad)]
    parents = [standardize(mols[i]) for i in keep]
    mols = parents if cfg.standardize else [mols[i] for i in keep]
    y = y[keep]
    task = cfg.task
    if task == "auto":
        observed = y[~np.isnan(y)]
        task = "classification" if np.isin(observed, (0.0, 1.0)).all() else "regression"
    if task == "classification" and not np.isin(y[~np.isnan(y)], (0.0, 1.0)).all():
        raise ZooError(f"{path}: task=classification needs 0/1 targets in {', '.join(targets)}")
    skipped_at = found.which(bad) if bad else ""
    return MolTable(name, [rows[i][smiles_col].strip() for i in keep], mols, y, targets, task, skipped=len(bad),
                    skipped_at=skipped_at,
                    parents=None if cfg.standardize else parents,
                    names=None if found.names is None else [found.names[i] for i in keep])


def standardize(mol):
    """RDKit's charge parent: the largest organic fragment, neutralised (salts and counter-ions go)."""
    from rdkit.Chem.MolStandardize import rdMolStandardize

    try:
        return rdMolStandardize.ChargeParent(mol)
    except Exception:  # a molecule RDKit cannot standardise is kept as parsed
        return mol


def without(table: MolTable, source: str) -> tuple[MolTable, int]:
    """``table`` less every molecule of ``source`` (a dataset name or a CSV with a SMILES column), matched as
    standardised canonical SMILES (``parent_smiles``): what ``exclude=`` leaves. Rows of ``source`` that do not
    parse match nothing. Returns the table and how many of its rows went."""
    from rdkit import Chem

    known = moleculenet(source)
    path = datasets.locate(source) if known is not None else Path(source).expanduser()
    column = known["smiles"] if known is not None else "smiles"
    if not path.is_file():
        raise ZooError(f"exclude={source}: no such CSV file, and not a dataset name (see `zoo data list`)")
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            if column not in (reader.fieldnames or []):
                raise ZooError(f"exclude={source}: {path} has no {column!r} column (columns: "
                               f"{column_list(reader.fieldnames or [])})")
            written = [(row[column] or "").strip() for row in reader]
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    quiet_rdkit()
    mols = (Chem.MolFromSmiles(s) for s in written)
    drop = {Chem.MolToSmiles(standardize(m)) for m in mols if m is not None and m.GetNumAtoms()}
    keep = [i for i, name in enumerate(parent_smiles(table)) if name not in drop]
    if not keep:
        raise ZooError(f"exclude={source}: every one of {table.name}'s {len(table.mols)} molecules is in it: no "
                       "molecules left to train on")
    if len(keep) == len(table.mols):
        return table, 0
    kept = MolTable(table.name, [table.smiles[i] for i in keep], [table.mols[i] for i in keep], table.y[keep],
                    table.targets, table.task, table.skipped, table.skipped_at,
                    None if table.parents is None else [table.parents[i] for i in keep],
                    None if table.names is None else [table.names[i] for i in keep])
    return kept, len(table.mols) - len(keep)


def canonical_smiles(table: MolTable) -> list[str]:
    """The standardised molecules as canonical SMILES: one spelling per molecule, salts stripped."""
    from rdkit import Chem

    return [Chem.MolToSmiles(m) for m in table.mols]


def parent_smiles(table: MolTable) -> list[str]:
    """The standardised parents as canonical SMILES: the split's item names, whatever ``standardize``."""
    from rdkit import Chem

    return [Chem.MolToSmiles(m) for m in table.split_mols]
