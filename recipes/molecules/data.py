"""The molecules and what both recipes see of them: the MoleculeNet tables and own CSVs (SMILES read, bad
rows named, standardised by RDKit), atom and bond features, RDKit descriptors and Morgan fingerprints (each
cached per set of molecules, in chunks: feature_cache.py), seeded random or Bemis-Murcko scaffold splits and folds,
and the metrics.

Three parts, train / validation / test (chemprop's convention: the split is drawn with the run's seed, so the mean
over seeds is a mean over splits). Early stopping and the best checkpoint read validation; the recipes' fit
functions never see the test molecules, which are scored once every model is final (``finish``), with a
bootstrap interval over them. ``split.csv`` names each molecule by its canonical SMILES.
"""
from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core.datafiles import column_list, not_utf8
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.metrics import bootstrap, score_tasks, summarize_folds
from recipe_zoo.recipes.molecules.config import MolConfig

# =============================================================================================
# Data: the CSV, invalid SMILES, standardisation
# =============================================================================================

# name -> (SMILES column, target columns, rows known not to parse); the files are in zoo.data
MOLECULENET = {
    "esol": ("smiles", ["measured log solubility in mols per litre"], 0),
    "lipophilicity": ("smiles", ["exp"], 0),
    "freesolv": ("smiles", ["expt"], 0),
    "bbbp": ("smiles", ["p_np"], 11),
}


@dataclass
class MolTable:
    name: str
    smiles: list[str]
    mols: list  # RDKit Mol objects, standardised
    y: np.ndarray  # (n, tasks) float, NaN where missing
    targets: list[str]
    task: str  # regression | classification
    skipped: int = 0  # rows dropped for unparsable SMILES


def _quiet_rdkit():
    from rdkit import RDLogger

    RDLogger.DisableLog("rdApp.*")  # parse failures are counted and reported by us, not printed


def read_table(cfg: MolConfig, data_path) -> MolTable:
    from rdkit import Chem

    _quiet_rdkit()
    if cfg.data in MOLECULENET:
        smiles_col, targets, known_bad = MOLECULENET[cfg.data]
        path, name = data_path(cfg.data), cfg.data
    else:
        path, smiles_col, targets, known_bad, name = Path(cfg.data).expanduser(), "smiles", [], 0, cfg.data
        if not path.is_file():
            raise ZooError(f"{cfg.data}: no such CSV file, and not a dataset name (see `zoo data list`)")
    smiles_col = cfg.smiles or smiles_col
    targets = [t.strip() for t in cfg.target.split(",") if t.strip()] if cfg.target else targets
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            rows = list(reader)
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except csv.Error as exc:
        raise ZooError(f"{path} row {reader.line_num}: cannot read as a CSV ({exc})") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read as a UTF-8 CSV ({exc})") from None
    if not columns:
        raise ZooError(f"{path}: empty file (no header row, no rows)")
    if not targets:
        raise ZooError(f"{path}: say which column to predict: target=COLUMN (columns: {column_list(columns)})")
    for col in [smiles_col, *targets]:
        if col not in columns:
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
                raise ZooError(f"{path} row {i + 2}: target {col!r} is {text!r}, not a number") from None
            if not math.isfinite(y[i, j]):
                raise ZooError(f"{path} row {i + 2}: target {col!r} is {text!r}")
    empty = np.where(np.isnan(y).all(axis=1))[0]
    if len(empty):
        raise ZooError(f"{path}: {len(empty)} rows have no target value (first: row {empty[0] + 2}); "
                       "remove them or fill them in")
    mols, bad = [], []
    for i, row in enumerate(rows):
        mol = Chem.MolFromSmiles((row[smiles_col] or "").strip())
        if mol is None or mol.GetNumAtoms() == 0:
            bad.append(i)
        mols.append(mol)
    skip = cfg.on_invalid == "skip" or (cfg.on_invalid == "auto" and known_bad and len(bad) == known_bad)
    if bad and not skip:
        first = ", ".join(str(i + 2) for i in bad[:5])
        raise ZooError(f"{path}: {len(bad)} SMILES do not parse (rows {first}{', ...' if len(bad) > 5 else ''}): "
                       f"row {bad[0] + 2} is {(rows[bad[0]][smiles_col] or '').strip()[:100]!r}; "
                       "fix them or set on_invalid=skip")
    keep = [i for i in range(len(rows)) if i not in set(bad)]
    mols = [standardize(mols[i]) if cfg.standardize else mols[i] for i in keep]
    y = y[keep]
    task = cfg.task
    if task == "auto":
        observed = y[~np.isnan(y)]
        task = "classification" if np.isin(observed, (0.0, 1.0)).all() else "regression"
    if task == "classification" and not np.isin(y[~np.isnan(y)], (0.0, 1.0)).all():
        raise ZooError(f"{path}: task=classification needs 0/1 targets in {', '.join(targets)}")
    return MolTable(name, [rows[i][smiles_col].strip() for i in keep], mols, y, targets, task, skipped=len(bad))


def standardize(mol):
    """RDKit's charge parent: the largest organic fragment, neutralised (salts and counter-ions go)."""
    from rdkit.Chem.MolStandardize import rdMolStandardize

    try:
        return rdMolStandardize.ChargeParent(mol)
    except Exception:  # a molecule RDKit cannot standardise is kept as parsed
        return mol


# =============================================================================================
# Featurisation: atoms and bonds (cached per dataset: feature_cache.cached)
# =============================================================================================

ELEMENTS = list(range(1, 101))  # atomic numbers, one-hot, plus "other"
DEGREES = [0, 1, 2, 3, 4, 5]
CHARGES = [-2, -1, 0, 1, 2]
HYDROGENS = [0, 1, 2, 3, 4]
FEATURE_VERSION = "3"  # bump when features change: invalidates the feature cache and trained runs' cards


def _one_hot(value, choices) -> list[float]:
    out = [0.0] * (len(choices) + 1)
    out[choices.index(value) if value in choices else len(choices)] = 1.0
    return out


@functools.cache
def _enums():
    from rdkit import Chem

    chiral = [Chem.ChiralType.CHI_UNSPECIFIED, Chem.ChiralType.CHI_TETRAHEDRAL_CW,
              Chem.ChiralType.CHI_TETRAHEDRAL_CCW, Chem.ChiralType.CHI_OTHER]
    hybrid = [Chem.HybridizationType.SP, Chem.HybridizationType.SP2, Chem.HybridizationType.SP3,
              Chem.HybridizationType.SP3D, Chem.HybridizationType.SP3D2]
    bonds = [Chem.BondType.SINGLE, Chem.BondType.DOUBLE, Chem.BondType.TRIPLE, Chem.BondType.AROMATIC]
    stereo = [Chem.BondStereo.STEREONONE, Chem.BondStereo.STEREOANY, Chem.BondStereo.STEREOZ,
              Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOCIS, Chem.BondStereo.STEREOTRANS]
    return chiral, hybrid, bonds, stereo


def atom_features(atom) -> list[float]:
    """Element, degree, formal charge, chirality, H count, hybridisation, aromaticity, ring, mass/100."""
    chiral, hybrid, _, _ = _enums()
    return (_one_hot(atom.GetAtomicNum(), ELEMENTS) + _one_hot(atom.GetTotalDegree(), DEGREES)
            + _one_hot(atom.GetFormalCharge(), CHARGES) + _one_hot(atom.GetChiralTag(), chiral)
            + _one_hot(atom.GetTotalNumHs(), HYDROGENS) + _one_hot(atom.GetHybridization(), hybrid)
            + [float(atom.GetIsAromatic()), float(atom.IsInRing()), atom.GetMass() / 100])


def bond_features(bond) -> list[float]:
    """Bond type, conjugation, ring membership, stereo."""
    _, _, bonds, stereo = _enums()
    return (_one_hot(bond.GetBondType(), bonds) + [float(bond.GetIsConjugated()), float(bond.IsInRing())]
            + _one_hot(bond.GetStereo(), stereo))


@dataclass
class Graphs:
    """All molecules of a table as one disjoint graph: atoms, directed bonds, and per-molecule offsets."""
    x: torch.Tensor  # (atoms, atom features)
    edge_attr: torch.Tensor  # (directed bonds, bond features)
    src: torch.Tensor  # directed bond k goes src[k] -> dst[k]; rev[k] is the opposite direction
    dst: torch.Tensor
    atom_ptr: torch.Tensor  # molecule i owns atoms atom_ptr[i]:atom_ptr[i+1]
    edge_ptr: torch.Tensor  # ... and directed bonds edge_ptr[i]:edge_ptr[i+1]


def featurize(mols: list) -> Graphs:
    xs, es, src, dst, atom_ptr, edge_ptr = [], [], [], [], [0], [0]
    for mol in mols:
        xs.extend(atom_features(a) for a in mol.GetAtoms())
        for bond in mol.GetBonds():
            f = bond_features(bond)
            i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
            src += [i, j]
            dst += [j, i]
            es += [f, f]
        atom_ptr.append(atom_ptr[-1] + mol.GetNumAtoms())
        edge_ptr.append(edge_ptr[-1] + 2 * mol.GetNumBonds())
    return Graphs(torch.tensor(xs, dtype=torch.float32),
                  torch.tensor(es, dtype=torch.float32).reshape(-1, bond_dim()),
                  torch.tensor(src, dtype=torch.long), torch.tensor(dst, dtype=torch.long),
                  torch.tensor(atom_ptr), torch.tensor(edge_ptr))


def bond_dim() -> int:
    _, _, bonds, stereo = _enums()
    return len(bonds) + 1 + 2 + len(stereo) + 1


def descriptor_names() -> list[str]:
    """This RDKit's 2-D descriptors, in its order (the list can change between RDKit releases)."""
    from rdkit.Chem import Descriptors

    return [n for n, _ in Descriptors.descList]


def rdkit_descriptors(mols: list, names: list[str] | None = None) -> np.ndarray:
    """RDKit's 2-D descriptors (about 210; ``names``: those, in that order, as a trained model saw them),
    non-finite values as NaN."""
    from rdkit.Chem import Descriptors

    names = names or descriptor_names()
    out = np.full((len(mols), len(names)), np.nan, dtype=np.float64)
    for i, mol in enumerate(mols):
        values = Descriptors.CalcMolDescriptors(mol, missingVal=float("nan"))
        out[i] = [values[n] for n in names]
    out[~np.isfinite(out) | (np.abs(out) > 1e30)] = np.nan  # also what would overflow float32 (e.g. Ipc)
    return out.astype(np.float32)


def morgan(mols: list, radius: int, bits: int, counts: bool) -> np.ndarray:
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    fp = gen.GetCountFingerprintAsNumPy if counts else gen.GetFingerprintAsNumPy
    return np.stack([fp(m) for m in mols]).astype(np.float32)


# =============================================================================================
# Splits
# =============================================================================================

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


# =============================================================================================
# Metrics (recipe_zoo.core.metrics.score_tasks), averaged over tasks, missing targets ignored
# =============================================================================================

# What each task reports, per target column (rows without a target left out; a classification column with one
# class left out whole), then the mean over the columns. The core calls a 0/1 column "binary".
METRIC_NAMES = {"regression": ("rmse", "mae", "r2"), "classification": ("roc_auc", "pr_auc", "macro_f1")}
SCORE_TASK = {"regression": "regression", "classification": "binary"}


def primary_metric(task: str) -> tuple[str, bool]:
    return ("rmse", False) if task == "regression" else ("roc_auc", True)


# =============================================================================================
# What both recipes do first: the table and its splits, logged; the first split for zoo doctor
# =============================================================================================

def run_splits(cfg: MolConfig, table: MolTable, seed: int):
    if cfg.folds:
        return list(fold_indices(table.mols, cfg.split, cfg.folds, seed))
    return [split_indices(table.mols, cfg.split, parse_sizes(cfg.split_sizes), seed)]


def canonical_smiles(table: MolTable) -> list[str]:
    """The standardised molecules as canonical SMILES: one spelling per molecule, salts stripped."""
    from rdkit import Chem

    return [Chem.MolToSmiles(m) for m in table.mols]


def record_split(run, cfg: MolConfig, table: MolTable, splits: list) -> None:
    """``split.csv`` by canonical SMILES and the split's one-line description. Folds: each molecule once, named by
    the fold that tests it (fold k's validation molecules are those fold k+1 tests)."""
    smiles = np.array(canonical_smiles(table), dtype=object)
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


def finish(run, table: MolTable, predicted: list) -> dict[str, float]:
    """Score every split once its models are final: ``predicted`` holds (validation rows, their predictions, test
    rows, their predictions) per split. The validation and test metrics (mean ± std over folds) and the primary
    metric's 95% bootstrap interval over the test molecules (of all folds, pooled; several targets: the mean over
    them on each resample, as ``score_tasks`` takes it)."""
    task, names = SCORE_TASK[table.task], METRIC_NAMES[table.task]
    results = []
    for k, (val, val_pred, test, test_pred) in enumerate(predicted):
        scores = {**{f"test_{m}": v for m, v in score_tasks(table.y[test], test_pred, task, names).items()},
                  **{f"val_{m}": v for m, v in score_tasks(table.y[val], val_pred, task, names).items()}}
        results.append(scores)
        run.log(f"split {k}: " + ", ".join(f"{m.replace('_', ' ', 1)} {v:.4f}" for m, v in scores.items()))
    metrics = summarize_folds(results, run.log)
    metric = primary_metric(table.task)[0]
    if not np.isfinite(metrics.get(f"test_{metric}", np.nan)):  # e.g. ROC-AUC of test molecules of one class
        raise ZooError(f"{table.name}: test_{metric} is undefined on these test molecules (one class only?); "
                       "use another split or more data")
    y = np.concatenate([table.y[test] for _, _, test, _ in predicted])
    pred = np.concatenate([test_pred for *_, test_pred in predicted])
    low, high = bootstrap(item_statistic(y, pred, table.task), len(y))
    metrics[f"test_{metric}_ci_low"], metrics[f"test_{metric}_ci_high"] = low, high
    return metrics


def item_statistic(y: np.ndarray, pred: np.ndarray, task: str):
    """The primary metric on a resample of molecules (``statistic(indices)`` for ``metrics.bootstrap``): RMSE per
    target from masked squared errors (vectorised), then the mean over targets; ROC-AUC by ``score_tasks``."""
    metric = primary_metric(task)[0]
    if task == "regression":
        present = ~np.isnan(y)
        squared = np.where(present, (np.asarray(pred, np.float64) - np.nan_to_num(y)) ** 2, 0.0)

        def rmse(idx: np.ndarray) -> float:
            n, total = present[idx].sum(axis=0), squared[idx].sum(axis=0)
            return float(np.mean(np.sqrt(total[n > 0] / n[n > 0]))) if (n > 0).any() else float("nan")
        return rmse
    return lambda idx: score_tasks(y[idx], pred[idx], SCORE_TASK[task], (metric,)).get(metric, float("nan"))


def load_for(cfg: MolConfig, run) -> MolTable:
    table = read_table(cfg, run.data_path)
    metric, higher = primary_metric(table.task)
    run.set_metric(f"test_{metric}", higher)
    if table.skipped:
        run.log(f"{table.name}: {table.skipped} rows with unparsable SMILES skipped")
        run.report("invalid_smiles_skipped", table.skipped)
    run.log(f"{table.name}: {len(table.mols)} molecules, {table.task}, targets {', '.join(table.targets)}; "
            f"{'k-fold ' + str(cfg.folds) if cfg.folds else cfg.split_sizes} {cfg.split} split")
    return table


def splits_for(cfg: MolConfig, table: MolTable, run) -> list:
    """The run's (train, validation, test) splits, recorded in ``split.csv``."""
    splits = run_splits(cfg, table, run.seed)
    record_split(run, cfg, table, splits)
    return splits


def inspect_split(run, table: MolTable, split, loop: bool) -> None:
    """The first split's training and validation molecules for ``zoo doctor`` (never the test ones): canonical SMILES
    of the standardised molecules (a duplicate is the same molecule however written, salts stripped); one target
    only (several targets have gaps the loss masks)."""
    if not run.inspecting:
        return
    smiles = canonical_smiles(table)
    y = table.y[:, 0] if table.y.shape[1] == 1 else None

    def rows(idx: np.ndarray) -> tuple:
        return ([smiles[i] for i in idx],) + ((y[idx],) if y is not None else ())

    run.inspect(train=rows(split[0]), val=rows(split[1]), task=table.task,
                num_classes=2 if table.task == "classification" else None, loop=loop)
