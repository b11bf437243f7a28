"""Molecular property prediction: a directed message-passing network (``molecules/dmpnn``) and Morgan
fingerprints into XGBoost (``molecules/fp-xgb``), on seeded random or Bemis-Murcko scaffold splits.

Reads top to bottom: config, reading the CSV, RDKit standardisation and featurisation (cached),
splits, metrics, the D-MPNN, its training, then the fingerprint baseline.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import optim, schedule
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.budget import Budget, xgboost_time_limit
from recipe_zoo.core.loop import BestState, LoopSettings, fit, peak_memory_mb
from recipe_zoo.core.metrics import summarize_folds
from recipe_zoo.core.precision import choose_device
from recipe_zoo.core.datafiles import column_list, not_utf8
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import recipe

# =============================================================================================
# Config
# =============================================================================================


@dataclass
class MolConfig(LoopSettings):
    data: str = "esol"  # esol | lipophilicity | freesolv | bbbp, or a CSV file
    smiles: str = ""  # SMILES column ('' = the dataset's, or 'smiles')
    target: str = ""  # target column(s), comma-separated for multi-task ('' = the dataset's)
    task: Literal["auto", "regression", "classification"] = "auto"  # auto: classification when targets are 0/1
    split: Literal["random", "scaffold"] = "random"  # seeded random, or Bemis-Murcko scaffold groups
    split_sizes: str = "0.8,0.1,0.1"  # train, validation, test fractions
    folds: int = 0  # k-fold cross-validation (scaffold-aware for split=scaffold); 0 = one split
    on_invalid: Literal["error", "skip", "auto"] = "auto"  # unparsable SMILES: auto = skip for a registered
    # dataset's known-bad rows (BBBP's 11), error for own data
    standardize: bool = True  # RDKit: keep the largest fragment, neutralise charges (salts, counter-ions)
    # D-MPNN
    depth: int = 3  # message-passing steps over directed bonds
    hidden: int = 300  # message and atom hidden size
    readout: Literal["mean", "sum"] = "mean"  # atom vectors to a molecule vector
    ffn_hidden: int = 300  # FFN head width
    ffn_layers: int = 2  # FFN head layers (including the output layer)
    dropout: float = 0.0  # dropout in messages and the head
    descriptors: bool = True  # RDKit 2-D descriptors: concatenated to the D-MPNN readout, beside the fingerprints
    ensemble: int = 1  # models trained (each on budget / n) and averaged
    lr: float = 1e-3  # peak AdamW LR
    weight_decay: float = 0.0  # AdamW weight decay on weights (never biases)
    batch_size: int = 50  # molecules per batch
    warmup: float = 0.04  # LR warmup fraction (from 0.1 x peak)
    lr_final: float = 0.1  # LR multiplier at the end (cosine)
    eval_every: float = 0.02  # validation this often; the best validation checkpoint is kept
    # fp-xgb
    radius: int = 2  # Morgan radius
    bits: int = 2048  # fingerprint length
    counts: bool = True  # count fingerprints (else bits)
    n_estimators: int = 3000  # XGBoost trees at most (early stopping on validation)
    xgb_lr: float = 0.03  # XGBoost learning rate
    max_depth: int = 6  # XGBoost tree depth
    early_stopping: int = 200  # rounds without validation improvement before stopping

    def benchmark_key(self, data_key: str) -> str:
        """Scaffold and random splits (and k-fold CV) are different benchmarks."""
        return (data_key + (f":{self.split}" if self.split != "random" else "")
                + (f":{self.folds}fold" if self.folds else ""))


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
# Featurisation: atoms and bonds (cached per dataset)
# =============================================================================================

ELEMENTS = list(range(1, 101))  # atomic numbers, one-hot, plus "other"
DEGREES = [0, 1, 2, 3, 4, 5]
CHARGES = [-2, -1, 0, 1, 2]
HYDROGENS = [0, 1, 2, 3, 4]
FEATURE_VERSION = "3"  # bump when features change: invalidates the cache (3: tensors only, weights_only loads)


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


def cache_path(kind: str, table: MolTable) -> Path:
    """Where ``cached`` keeps a feature kind of these molecules: ~/.cache/zoo/features, keyed by content."""
    from rdkit import Chem

    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo" / "features"
    digest = hashlib.sha256("\n".join(Chem.MolToSmiles(m) for m in table.mols).encode()).hexdigest()[:16]
    return root / f"{kind}-v{FEATURE_VERSION}-{digest}.pt"


def cached(kind: str, table: MolTable, make):
    """``make()``'s result (a ``Graphs`` or an array) cached as plain tensors and read back with
    ``weights_only=True``: a cache file replaced by a pickle that carries code is refused, never run."""
    path = cache_path(kind, table)
    if path.is_file():
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # weights_only refuses any pickle beyond tensors and containers
            raise ZooError(f"{path}: not a plain tensor file, refused unread ({type(exc).__name__}); "
                           "delete it and the features are computed again") from None
        return Graphs(**state["graphs"]) if "graphs" in state else state["array"].numpy()
    value = make()
    state = ({"graphs": {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}}
             if isinstance(value, Graphs) else {"array": torch.from_numpy(np.ascontiguousarray(value))})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the ranks of a torchrun job may write at once
    torch.save(state, tmp)
    os.replace(tmp, path)
    return value


def rdkit_descriptors(mols: list) -> np.ndarray:
    """RDKit's 2-D descriptors (about 210), non-finite values as NaN."""
    from rdkit.Chem import Descriptors

    names = [n for n, _ in Descriptors.descList]
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
# Metrics (scikit-learn), averaged over tasks, missing targets ignored
# =============================================================================================

def score(y: np.ndarray, pred: np.ndarray, task: str) -> dict[str, float]:
    from sklearn import metrics as skm

    per_task: dict[str, list[float]] = {}
    for t in range(y.shape[1]):
        ok = ~np.isnan(y[:, t])
        yt, pt = y[ok, t], pred[ok, t]
        if task == "regression":
            values = {"rmse": float(np.sqrt(skm.mean_squared_error(yt, pt))),
                      "mae": float(skm.mean_absolute_error(yt, pt)), "r2": float(skm.r2_score(yt, pt))}
        else:
            if len(np.unique(yt)) < 2:
                continue  # AUC is undefined on one class
            values = {"roc_auc": float(skm.roc_auc_score(yt, pt)), "pr_auc": float(skm.average_precision_score(yt, pt)),
                      "macro_f1": float(skm.f1_score(yt, pt > 0.5, average="macro"))}
        for k, v in values.items():
            per_task.setdefault(k, []).append(v)
    return {k: float(np.mean(v)) for k, v in per_task.items()}


def primary_metric(task: str) -> tuple[str, bool]:
    return ("rmse", False) if task == "regression" else ("roc_auc", True)


# =============================================================================================
# The D-MPNN
# =============================================================================================

@dataclass
class GraphBatch:
    x: torch.Tensor
    edge_attr: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor
    rev: torch.Tensor
    mol_of_atom: torch.Tensor
    n_mols: int
    extra: torch.Tensor | None

    def to(self, device) -> GraphBatch:
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device, non_blocking=True)
                                            for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})


def collate(g: Graphs, idx: torch.Tensor, extra: torch.Tensor | None) -> GraphBatch:
    """The molecules ``idx`` as one disjoint graph, atoms renumbered from 0 in batch order."""
    a0, a1 = g.atom_ptr[idx], g.atom_ptr[idx + 1]
    e0, e1 = g.edge_ptr[idx], g.edge_ptr[idx + 1]
    n_atoms, n_edges = a1 - a0, e1 - e0
    atoms = torch.cat([torch.arange(s, e) for s, e in zip(a0.tolist(), a1.tolist())])
    edges = torch.cat([torch.arange(s, e) for s, e in zip(e0.tolist(), e1.tolist())]
                      + [torch.zeros(0, dtype=torch.long)])
    offset = torch.repeat_interleave(torch.cumsum(n_atoms, 0) - n_atoms, n_edges)  # stored indices are per molecule
    rev = torch.arange(len(edges)) ^ 1  # bonds are stored as (i->j, j->i) pairs, each molecule's count even
    return GraphBatch(g.x[atoms], g.edge_attr[edges], g.src[edges] + offset, g.dst[edges] + offset, rev,
                      torch.repeat_interleave(torch.arange(len(idx)), n_atoms), len(idx),
                      extra[idx] if extra is not None else None)


class DMPNN(nn.Module):
    """Directed message passing over bonds (Yang et al. 2019, the chemprop architecture).

    h0(v->w) = relu(W_i [x_v, e_vw]); m(v->w) = sum of h(k->v) over k != w; h = relu(h0 + W_h m);
    after the last step atoms gather their incoming messages: h_v = relu(W_o [x_v, sum h(k->v)]).
    """

    def __init__(self, atom_dim: int, bond_dim: int, extra_dim: int, tasks: int, cfg: MolConfig):
        super().__init__()
        self.depth, self.readout = cfg.depth, cfg.readout
        self.W_i = nn.Linear(atom_dim + bond_dim, cfg.hidden, bias=False)
        self.W_h = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.W_o = nn.Linear(atom_dim + cfg.hidden, cfg.hidden)
        self.dropout = nn.Dropout(cfg.dropout)
        layers, width = [], cfg.hidden + extra_dim
        for _ in range(cfg.ffn_layers - 1):
            layers += [nn.Dropout(cfg.dropout), nn.Linear(width, cfg.ffn_hidden), nn.ReLU()]
            width = cfg.ffn_hidden
        layers += [nn.Dropout(cfg.dropout), nn.Linear(width, tasks)]
        self.head = nn.Sequential(*layers)

    def forward(self, b: GraphBatch) -> torch.Tensor:
        h0 = F.relu(self.W_i(torch.cat([b.x[b.src], b.edge_attr], dim=1)))
        h = h0
        for _ in range(self.depth - 1):
            incoming = torch.zeros(len(b.x), h.size(1), device=h.device, dtype=h.dtype).index_add_(0, b.dst, h)
            h = self.dropout(F.relu(h0 + self.W_h(incoming[b.src] - h[b.rev])))
        incoming = torch.zeros(len(b.x), h.size(1), device=h.device, dtype=h.dtype).index_add_(0, b.dst, h)
        atoms = self.dropout(F.relu(self.W_o(torch.cat([b.x, incoming], dim=1))))
        mol = torch.zeros(b.n_mols, atoms.size(1), device=atoms.device, dtype=atoms.dtype)
        mol.index_add_(0, b.mol_of_atom, atoms)
        if self.readout == "mean":
            counts = torch.bincount(b.mol_of_atom, minlength=b.n_mols).clamp(min=1).unsqueeze(1)
            mol = mol / counts
        if b.extra is not None:
            mol = torch.cat([mol, b.extra], dim=1)
        return self.head(mol)


@torch.no_grad()
def predict(model: nn.Module, graphs: Graphs, idx: np.ndarray, extra, device, task: str, batch: int = 256):
    model.eval()
    out = []
    for i in range(0, len(idx), batch):
        b = collate(graphs, torch.as_tensor(idx[i:i + batch]), extra).to(device)
        out.append(model(b).float().cpu())
    p = torch.cat(out)
    return torch.sigmoid(p).numpy() if task == "classification" else p.numpy()


# =============================================================================================
# Training the D-MPNN
# =============================================================================================

def masked_loss(pred: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    mask = ~torch.isnan(y)
    target = torch.nan_to_num(y)
    if task == "classification":
        loss = F.binary_cross_entropy_with_logits(pred, target, reduction="none")
    else:
        loss = F.mse_loss(pred, target, reduction="none")
    return (loss * mask).sum() / mask.sum().clamp(min=1)


def standardizer(values: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std over the training rows (NaN-aware), std 1 where a column is constant or empty."""
    mean = np.nan_to_num(np.nanmean(values[idx], axis=0))
    std = np.nan_to_num(np.nanstd(values[idx], axis=0), nan=1.0)
    std[std < 1e-8] = 1.0
    return mean, std


def train_dmpnn_split(cfg: MolConfig, run, table: MolTable, graphs: Graphs, desc, split, budget: Budget,
                      device, member_seed: int, label: str) -> tuple[np.ndarray, dict]:
    """One model on one split: returns test predictions and its validation metrics."""
    train_idx, val_idx, test_idx = split
    task = table.task
    y = table.y.copy()
    if task == "regression":
        y_mean, y_std = standardizer(y, train_idx)
        y = (y - y_mean) / y_std
    extra = None
    if desc is not None:
        d_mean, d_std = standardizer(desc, train_idx)
        extra = torch.from_numpy(np.clip(np.nan_to_num((desc - d_mean) / d_std), -10, 10).astype(np.float32))
    torch.manual_seed(member_seed)
    model = DMPNN(graphs.x.size(1), graphs.edge_attr.size(1), 0 if extra is None else extra.size(1),
                  y.shape[1], cfg).to(device)
    targets = torch.from_numpy(y).float()
    # Batches of molecule indices (the shared batcher keeps resume exact), each collated into one graph.
    batches = TensorBatches((torch.as_tensor(train_idx),), cfg.batch_size, seed=member_seed,
                            transform=lambda batch, g: (collate(graphs, batch[0], extra), targets[batch[0]]))
    groups = optim.decay_groups(model, cfg.weight_decay)
    optimizer = optim.adamw(groups, lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8)
    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=cfg.lr_final, start=0.1)
    metric, higher = primary_metric(task)
    best = BestState(higher)

    def unscale(p: np.ndarray) -> np.ndarray:
        return p * y_std + y_mean if task == "regression" else p

    def evaluate(m: nn.Module) -> dict[str, float]:
        val = score(table.y[val_idx], unscale(predict(m, graphs, val_idx, extra, device, task)), task)
        value = val.get(metric, float("nan"))
        best.update(value, m)
        return {f"val_{k}": v for k, v in val.items()}

    def loss_fn(m: nn.Module, batch) -> torch.Tensor:
        b, target = batch
        return masked_loss(m(b.to(device)), target.to(device), task)

    settings = LoopSettings.of(cfg)
    result = fit(model, optimizer, batches, loss_fn, run.part(budget, main=label == ""), device=device,
                 evaluate=evaluate, update_hparams=functools.partial(schedule.apply_schedules, lr=lr),
                 settings=settings, keep={"best": best})
    best.restore(model)  # the best validation checkpoint, as chemprop keeps
    test_pred = unscale(predict(model, graphs, test_idx, extra, device, task))
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    return test_pred, stats


def run_splits(cfg: MolConfig, table: MolTable, seed: int):
    if cfg.folds:
        return list(fold_indices(table.mols, cfg.split, cfg.folds, seed))
    return [split_indices(table.mols, cfg.split, parse_sizes(cfg.split_sizes), seed)]


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


def inspect_split(run, table: MolTable, split, loop: bool) -> None:
    """The first split for ``zoo doctor``: canonical SMILES of the standardised molecules (a duplicate is the same
    molecule however written, salts stripped), validation and test rows held out together; one target only (several
    targets have gaps the loss masks)."""
    if not run.inspecting:
        return
    from rdkit import Chem

    smiles = [Chem.MolToSmiles(m) for m in table.mols]
    y = table.y[:, 0] if table.y.shape[1] == 1 else None

    def rows(idx: np.ndarray) -> tuple:
        return ([smiles[i] for i in idx],) + ((y[idx],) if y is not None else ())

    run.inspect(train=rows(split[0]), val=rows(np.concatenate(split[1:])), task=table.task,
                num_classes=2 if table.task == "classification" else None, loop=loop)


@recipe("molecules/dmpnn", config=MolConfig, benchmark="esol", metric="test_rmse", higher_is_better=False,
        budget="30s", summary="directed message passing over bonds (chemprop's D-MPNN) in plain torch; random or "
                              "scaffold splits, k-fold, ensembles; RMSE or ROC-AUC")
def train_dmpnn(cfg: MolConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    table = load_for(cfg, run)
    graphs = cached("graphs", table, lambda: featurize(table.mols))
    desc = cached("descriptors", table, lambda: rdkit_descriptors(table.mols)) if cfg.descriptors else None
    if cfg.ensemble < 1:
        raise ZooError(f"ensemble={cfg.ensemble}: must be at least 1")
    splits = run_splits(cfg, table, run.seed)
    inspect_split(run, table, splits[0], loop=True)
    per_model = Budget(run.budget.kind, run.budget.amount / (cfg.ensemble * len(splits)))
    results, total_seconds, last = [], 0.0, {}
    for k, split in enumerate(splits):
        preds = []
        for member in range(cfg.ensemble):
            label = "" if k == 0 and member == 0 else f"fold {k} model {member}"
            pred, stats = train_dmpnn_split(cfg, run, table, graphs, desc, split, per_model, device,
                                            member_seed=run.seed * 1000 + member, label=label)
            preds.append(pred)
            total_seconds += stats["train_seconds"]
            last = stats
        test = score(table.y[split[2]], np.mean(preds, axis=0), table.task)
        results.append({f"test_{m}": v for m, v in test.items()})
        run.log(f"split {k}: " + ", ".join(f"test {m} {v:.4f}" for m, v in test.items()))
    metrics = summarize_folds(results, run.log)
    return {**metrics, "train_seconds": total_seconds, "params_M": last["params_M"],
            "peak_mem_mb": last["peak_mem_mb"], "mfu_percent": last["mfu_percent"], "molecules": len(table.mols)}


# =============================================================================================
# Fingerprints + XGBoost
# =============================================================================================

@recipe("molecules/fp-xgb", config=MolConfig, benchmark="esol", metric="test_rmse", higher_is_better=False,
        budget="30s", summary="Morgan count fingerprints (+ RDKit descriptors) into XGBoost with early stopping: "
                              "the strong classical baseline",
        scale_out="single process: XGBoost uses its own threads (nthread = all cores); for several machines "
                  "use xgboost.dask, xgboost.spark or Ray's xgboost_ray with the same parameters")
def train_fp_xgb(cfg: MolConfig, run) -> dict[str, float]:
    import xgboost as xgb

    table = load_for(cfg, run)
    features = [cached(f"morgan-r{cfg.radius}-b{cfg.bits}-c{int(cfg.counts)}", table,
                       lambda: morgan(table.mols, cfg.radius, cfg.bits, cfg.counts))]
    if cfg.descriptors:
        features.append(cached("descriptors", table, lambda: rdkit_descriptors(table.mols)))
    X = np.concatenate(features, axis=1)
    splits = run_splits(cfg, table, run.seed)
    inspect_split(run, table, splits[0], loop=False)
    seconds = run.budget.amount / (len(splits) * table.y.shape[1]) if run.budget.kind == "seconds" else None
    results, total, trees = [], 0.0, []
    for k, (train_idx, val_idx, test_idx) in enumerate(splits):
        pred = np.zeros((len(test_idx), table.y.shape[1]))
        for t in range(table.y.shape[1]):
            tr, va = train_idx[~np.isnan(table.y[train_idx, t])], val_idx[~np.isnan(table.y[val_idx, t])]
            params = dict(n_estimators=cfg.n_estimators, learning_rate=cfg.xgb_lr, max_depth=cfg.max_depth,
                          subsample=0.8, colsample_bytree=0.5, min_child_weight=1, tree_method="hist",
                          early_stopping_rounds=cfg.early_stopping, random_state=run.seed, n_jobs=os.cpu_count(),
                          callbacks=[xgboost_time_limit(seconds)] if seconds else None)
            model = xgb.XGBClassifier(**params) if table.task == "classification" else xgb.XGBRegressor(**params)
            start = time.perf_counter()
            model.fit(X[tr], table.y[tr, t], eval_set=[(X[va], table.y[va, t])], verbose=False)
            total += time.perf_counter() - start
            trees.append(model.best_iteration + 1)
            pred[:, t] = model.predict_proba(X[test_idx])[:, 1] if table.task == "classification" else \
                model.predict(X[test_idx])
        test = score(table.y[test_idx], pred, table.task)
        results.append({f"test_{m}": v for m, v in test.items()})
        run.log(f"split {k}: " + ", ".join(f"test {m} {v:.4f}" for m, v in test.items()) +
                f"; best iteration {trees[-1]}")
    metrics = summarize_folds(results, run.log)
    run.report("features", f"{X.shape[1]} ({cfg.bits} Morgan r{cfg.radius}{' counts' if cfg.counts else ''}"
                           f"{' + RDKit descriptors' if cfg.descriptors else ''})")
    return {**metrics, "train_seconds": total, "trees": float(np.mean(trees)), "molecules": len(table.mols),
            "peak_mem_mb": peak_memory_mb(torch.device("cpu"))}
