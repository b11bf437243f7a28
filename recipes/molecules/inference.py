"""A trained molecules run, applied: what both recipes save beside their models (the featuriser's settings and
RDKit version on the card, the test molecules' predictions) and what their predict hooks share: a CSV of SMILES
read (an invalid SMILES is a blank row, counted, never a crash), features made a batch at a time, one prediction
column per target added to the user's own columns; with no ``data=``, the run's own splits rebuilt and scored by
``scoring.finish``, as the run scored them.
"""
from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core import datasets
from recipe_zoo.core.artifact import PredictOptions, Predictions
from recipe_zoo.core.datafiles import column_list
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.metrics import score_tasks
from recipe_zoo.recipes.molecules.config import MolConfig
from recipe_zoo.recipes.molecules.features import FEATURE_VERSION, descriptor_names
from recipe_zoo.recipes.molecules.run_data import load_for, run_splits
from recipe_zoo.recipes.molecules.scoring import METRIC_NAMES, SCORE_TASK
from recipe_zoo.recipes.molecules import records
from recipe_zoo.recipes.molecules.table import MolTable, canonical_smiles, moleculenet, quiet_rdkit, standardize


@dataclass
class MolPredictOptions(PredictOptions):
    smiles: str = ""  # SMILES column of data= ('' = the column the run trained on, e.g. smiles)
    sep: str = ""  # separator of a delimited data= file ('' = sniffed among , tab ; |)
    comment: str = ""  # lines of data= that start with this are skipped ('' = the # lines at the top)


# =============================================================================================
# What the card says about the input: the featuriser, its RDKit, the targets
# =============================================================================================

def smiles_column(cfg: MolConfig) -> str:
    known = moleculenet(cfg.data)
    return cfg.smiles or (known["smiles"] if known is not None else "smiles")


def table_digest(table: MolTable) -> str:
    """The training table's molecules and targets: predict without data= checks it is scoring the same table."""
    text = "\n".join(f"{s}\t{' '.join(map(repr, y.tolist()))}" for s, y in zip(canonical_smiles(table), table.y))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def featuriser(cfg: MolConfig, table: MolTable, **more) -> dict:
    """The card's ``preprocess``: what turns a SMILES into the model's input, and which RDKit made it."""
    import rdkit

    return {"smiles": smiles_column(cfg), "targets": table.targets, "task": table.task, "rdkit": rdkit.__version__,
            "feature_version": FEATURE_VERSION, "standardize": cfg.standardize,
            "descriptors": descriptor_names() if cfg.descriptors else None,
            "table_digest": table_digest(table), **more}


def check_featuriser(run) -> dict:
    """The card's featuriser, checked against this RDKit: another feature version or a descriptor this RDKit
    lacks is one line (the model cannot see the same input); another RDKit release is logged."""
    import rdkit

    pre = run.card["preprocess"]
    card = run.dir / "model.json"
    if pre["feature_version"] != FEATURE_VERSION:
        raise ZooError(f"{card}: atom and bond features version {pre['feature_version']}, and this zoo makes "
                       f"version {FEATURE_VERSION}; use the zoo version that trained it, or retrain")
    missing = sorted(set(pre["descriptors"] or ()) - set(descriptor_names()))
    if missing:
        raise ZooError(f"{card}: RDKit {rdkit.__version__} lacks {len(missing)} descriptors the model was trained on "
                       f"(RDKit {pre['rdkit']}): {', '.join(missing[:5])}; install rdkit=={pre['rdkit']}")
    if pre["rdkit"] != rdkit.__version__:
        run.log(f"note: trained with RDKit {pre['rdkit']}, featurising with {rdkit.__version__} (descriptors may "
                "differ slightly)")
    return pre


def prediction_columns(pre: dict) -> list[str]:
    """One column per target: its predicted value, or for classification the probability of 1."""
    return [("prob_" if pre["task"] == "classification" else "pred_") + t for t in pre["targets"]]


def _number(value) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


# =============================================================================================
# The run's own splits: rebuilt, checked, their test molecules' rows
# =============================================================================================

def own_table(cfg: MolConfig, run) -> tuple[MolTable, list]:
    """The run's table and splits, rebuilt from its config and seed; a table that changed since is one line."""
    table = load_for(cfg, run)
    if table_digest(table) != run.card["preprocess"].get("table_digest"):
        raise ZooError(f"{cfg.data}: not the table this run trained on (its molecules or targets changed since), so "
                       "its test split cannot be scored again; give data=FILE to predict on it")
    return table, run_splits(cfg, table, run.seed)


def split_rows(table: MolTable, column: str, predicted: list, pre: dict) -> list[dict]:
    """The test molecules' rows (``predictions.csv``; ``fold`` when there are several): SMILES as written, each
    target (blank where missing) and its prediction."""
    names = prediction_columns(pre)
    rows = []
    for k, (_, _, test, pred) in enumerate(predicted):
        for i, p in zip(test, pred):
            row = {**({records.NAME: table.names[i]} if table.names is not None else {}), column: table.smiles[i],
                   **({"fold": k} if len(predicted) > 1 else {})}
            row.update({t: _number(v) for t, v in zip(table.targets, table.y[i])})
            row.update({c: float(v) for c, v in zip(names, p)})
            rows.append(row)
    return rows


def own_split(table: MolTable, column: str, predicted: list, metrics: dict, pre: dict) -> Predictions:
    test = np.concatenate([pred for *_, pred in predicted])
    return Predictions(rows=split_rows(table, column, predicted, pre), metrics=metrics, arrays={"prediction": test})


# =============================================================================================
# New data: a file of molecules, features a batch at a time, its rows back with prediction columns
# =============================================================================================

@dataclass
class MolInput:
    path: Path
    columns: list[str]
    rows: list[dict]
    mols: list  # standardised RDKit molecules of the rows that parse, in row order
    valid: np.ndarray  # row indices of ``mols``
    found: records.Records | None = None  # the file as read: where each row is in it (line, or SD record)

    def where(self, i: int) -> str:
        return self.found.where(i) if self.found is not None else f"row {i + 2}"


def read_molecules(opts: MolPredictOptions, run, pre: dict) -> MolInput:
    """``data=``: a CSV (or a registered dataset's name) with a SMILES column; rows that do not parse stay as
    blank rows, counted and logged."""
    from rdkit import Chem

    quiet_rdkit()
    path, column = Path(opts.data).expanduser(), opts.smiles or pre["smiles"]
    known = moleculenet(opts.data)
    if not path.is_file() and known is not None:
        path, column = datasets.locate(opts.data), opts.smiles or known["smiles"]
    elif not path.is_file():
        raise ZooError(f"data={opts.data}: {'a folder' if path.is_dir() else 'no such file'}; molecules are read "
                       f"from {records.READS}")
    try:
        found = records.read(path, column, opts.sep, opts.comment)
    except csv.Error as exc:
        raise ZooError(f"{path}: cannot read as delimited text ({exc})") from None
    columns, rows = found.columns, found.rows
    if column not in columns:
        raise ZooError(f"{path}: no SMILES column {column!r} (columns: {column_list(columns) or 'none'}); "
                       "set smiles=COLUMN")
    if not rows:
        raise ZooError(f"{path}: no rows")
    mols, valid, bad = [], [], []
    for i, row in enumerate(rows):
        text = (row[column] or "").strip()
        mol = Chem.MolFromSmiles(text) if text else None
        if mol is None or mol.GetNumAtoms() == 0:
            bad.append(i)
            continue
        mols.append(standardize(mol) if pre["standardize"] else mol)
        valid.append(i)
    if bad:
        what = "records" if found.names is not None else "SMILES"
        run.log(f"{path}: {len(bad)} of {len(rows)} {what} do not parse ({found.which(bad)}): their predictions "
                "are blank")
    return MolInput(path, columns, rows, mols, np.array(valid, dtype=np.int64), found)


def in_batches(mols: list, size: int, predict, tasks: int, run) -> np.ndarray:
    """``predict(batch of molecules)`` over ``mols``, a batch at a time (features included), with progress."""
    out = [np.zeros((0, tasks), dtype=np.float32)]
    for start in range(0, len(mols), size):
        out.append(predict(mols[start:start + size]))
        run.progress(min(start + size, len(mols)), len(mols), "molecules")
    return np.concatenate(out)


def new_rows(inp: MolInput, pred: np.ndarray, pre: dict) -> Predictions:
    """The user's rows with one prediction column per target (blank where the SMILES does not parse); when the
    file has the target columns too, the metrics on the rows that parse."""
    full = np.full((len(inp.rows), len(pre["targets"])), np.nan)
    full[inp.valid] = pred
    names = prediction_columns(pre)
    rows = [{**row, **{c: _number(v) for c, v in zip(names, p)}} for row, p in zip(inp.rows, full)]
    metrics = {}
    if len(inp.valid) and all(t in inp.columns for t in pre["targets"]):
        y = np.array([[_target(inp, i, t) for t in pre["targets"]] for i in inp.valid], dtype=np.float64)
        if not np.isnan(y).all():
            metrics = score_tasks(y, pred, SCORE_TASK[pre["task"]], METRIC_NAMES[pre["task"]])
    return Predictions(rows=rows, metrics=metrics, arrays={"prediction": full},
                       dropped=len(inp.rows) - len(inp.valid))


def _target(inp: MolInput, i: int, column: str) -> float:
    text = (inp.rows[i][column] or "").strip()
    if text == "" or text.lower() in ("nan", "na"):
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ZooError(f"{inp.path} {inp.where(i)}: target {column!r} is {text!r}, not a number") from None
