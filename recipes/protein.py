"""Protein fitness and variant effects with ESM-2 (fair-esm): frozen embeddings + a head
(``protein/esm-embed``), fine-tuning with LoRA or end to end (``protein/esm-finetune``), zero-shot
masked-marginal mutation scores (``protein/esm-zeroshot``), and one-hot/BLOSUM + ridge, the
no-pretraining floor every protein table needs (``protein/onehot``).

Reads top to bottom: config, reading sequences (FASTA, CSV, NPZ of embeddings, FLIP splits),
splits and metrics, encodings, the heads (closed-form ridge and RBF kernel ridge, an MLP through
the core loop), ESM-2 weights and cached embeddings, fine-tuning, zero-shot scoring, the recipes.
"""
from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import io
import math
import os
import pickle
import re
import time
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import optim, schedule
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.loop import BestState, LoopSettings, fit, peak_memory_mb
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision
from recipe_zoo.core.datafiles import column_list, not_utf8
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import recipe

# =============================================================================================
# Config
# =============================================================================================


@dataclass
class ProteinConfig(LoopSettings):
    LR_FIELDS: ClassVar[dict] = {"all": ("lr", "head_lr")}  # the LRs zoo doctor's range test scales together
    data: str = "p62593"  # dataset name (zoo data list), or a FASTA / CSV / NPZ file
    target: str = ""  # CSV column or NPZ array to predict ('' = the dataset's, else 'target')
    sequence: str = "sequence"  # CSV column holding the sequences
    label_field: int = -1  # FASTA: which '|'-separated header field is the label (-1 = the last)
    task: Literal["auto", "regression", "classification"] = "auto"  # auto: classes when labels are words or 0/1
    split: str = ""  # flip-gb1: one_vs_rest | two_vs_rest | three_vs_rest | low_vs_high | sampled
    split_sizes: str = "0.8,0.1,0.1"  # train, validation, test fractions of a seeded random split
    max_len: int = 1022  # residues; longer sequences are an error, or cropped with too_long=crop
    too_long: Literal["error", "crop"] = "error"  # crop keeps the first max_len residues
    # heads on fixed features (onehot, esm-embed)
    encoding: Literal["onehot", "blosum"] = "onehot"  # protein/onehot: 21 letters per position, or BLOSUM62 rows
    head: Literal["auto", "ridge", "krr", "mlp"] = "auto"  # auto: ridge, RBF kernel ridge and the MLP; the best on
    # validation is kept
    hidden: int = 256  # MLP head width (esm-finetune: the head on pooled embeddings)
    dropout: float = 0.1  # MLP head dropout
    lr: float = 0.0  # peak AdamW LR; 0 = mlp head 1e-3, LoRA 1e-3, full fine-tune 3e-5, from scratch 1e-3
    weight_decay: float = 0.01  # AdamW weight decay on weights (never biases, norms, embeddings)
    batch_size: int = 0  # sequences per step; 0 = 64 for the MLP head, 16 for fine-tuning
    warmup: float = 0.1  # LR warmup fraction, then cosine to zero
    eval_every: float = 0.05  # validation this often; the best validation checkpoint is kept
    # ESM-2 (fair-esm)
    esm_model: str = "esm2_t6_8M_UR50D"  # fair-esm name (esm2_t6_8M_UR50D ... esm2_t36_3B_UR50D), or scratch
    esm_weights: str = ""  # a local fair-esm .pt file (else the torch hub cache, downloaded when online)
    layer: int = -1  # representation layer (-1 = the last)
    pool: Literal["mean", "bos"] = "mean"  # residue mean (without BOS/EOS), or the BOS token
    toks_per_batch: int = 8192  # tokens per embedding / scoring forward pass
    # esm-finetune
    finetune: Literal["lora", "full"] = "lora"  # LoRA on the attention projections, or every weight
    lora_r: int = 8  # LoRA rank
    lora_alpha: int = 16  # LoRA scale numerator (scale = alpha / r)
    lora_dropout: float = 0.05  # dropout on the LoRA input
    layer_decay: float = 1.0  # layer-wise LR decay towards the input (1 = off; 0.8 typical)
    head_lr: float = 1e-3  # LR of the new head
    scratch_layers: int = 2  # esm_model=scratch: a randomly initialised ESM-2 of this depth ...
    scratch_dim: int = 64  # ... width ...
    scratch_heads: int = 4  # ... and attention heads
    # esm-zeroshot
    mutant: str = "mutant"  # mutation column: H24C, or H24C:A50G for multiple mutants
    wt: str = ""  # wild type: a FASTA file or the sequence itself ('' = the dataset's)
    offset: int = 1  # the number of the wild type's first residue in the mutation strings

    def benchmark_key(self, data_key: str) -> str:
        """Each FLIP split is its own benchmark."""
        return f"{data_key}:{self.split or FLIP_DEFAULT}" if data_key == "flip-gb1" else data_key


@dataclass
class EmbedConfig(ProteinConfig):
    data: str = "tem1-esm2-8m"  # dataset name (zoo data list), or a FASTA / CSV file, or an NPZ of embeddings


@dataclass
class ZeroShotConfig(ProteinConfig):
    data: str = "blat-ecolx-dms"  # dataset name, or a CSV of mutations (mutant=, target=) with wt=


# =============================================================================================
# Reading sequences: FASTA, CSV, NPZ embeddings, FLIP splits, mutation tables
# =============================================================================================

AMINO = "ACDEFGHIKLMNPQRSTVWY"
EXTRA = "XBZUO"  # unknown, ambiguous (B, Z), selenocysteine, pyrrolysine: in ESM's alphabet too
FLIP_SPLITS = ("one_vs_rest", "two_vs_rest", "three_vs_rest", "low_vs_high", "sampled")
FLIP_DEFAULT = "three_vs_rest"
# TEM-1's mature chain (UniProt P62593 without the 23-residue signal peptide), numbered from 24 as
# the ESM-1v benchmark does; the same residues as any synonymous record of P62593.fasta.
BLAT_WT = ("HPETLVKVKDAEDQLGARVGYIELDLNSGKILESFRPEERFPMMSTFKVLLCGAVLSRVDAGQEQLGRRIHYSQNDLVEYSPVTEKHLTDGMTVREL"
           "CSAAITMSDNTAANLLLTTIGGPKELTAFLHNMGDHVTRLDRWEPELNEAIPNDERDTTMPAAMATTLRKLLTGELLTLASRQQLIDWMEADKVAGP"
           "LLRSALPAGWFIADKSGAGERGSRGIIAALGPDGKPSRIVVIYTTGSQATMDERNRQIAEIGASLIKHW")
# name -> how to read it (the files are registered in zoo.data)
DATASETS = {
    "tem1-esm2-8m": {"kind": "npz", "target": "fitness"},
    "p62593": {"kind": "fasta", "split": "esm-example"},
    "flip-gb1": {"kind": "flip"},
    "blat-ecolx-dms": {"kind": "mutations", "target": "2500", "wt": BLAT_WT, "offset": 24},
}


@dataclass
class ProteinData:
    name: str
    y: np.ndarray  # (n,) float targets, or class indices for classification
    task: str  # regression | classification
    seqs: list[str] | None = None
    emb: np.ndarray | None = None  # precomputed embeddings (NPZ input)
    classes: list[str] | None = None
    split: tuple | None = None  # fixed (train, validation, test) indices, when the data defines them
    skipped: int = 0


def check_sequence(seq: str, where: str, cfg: ProteinConfig) -> str:
    """Upper-cased, letters checked against the alphabet, length against max_len (or cropped)."""
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
        seq = seq[:cfg.max_len]
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


def read_fasta(path: Path) -> list[tuple[str, str, int]]:
    """(header, sequence, line number of the header) for each record."""
    records: list[tuple[str, list[str], int]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if line.startswith(">"):
                    records.append((line[1:].strip(), [], n))
                elif line:
                    if not records:
                        raise ZooError(f"{path} line {n}: sequence before the first '>' header; is this FASTA?")
                    records[-1][1].append(line)
    except UnicodeDecodeError:
        raise not_utf8(path, "line") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read as a UTF-8 FASTA file ({exc})") from None
    if not records:
        raise ZooError(f"{path}: no FASTA records")
    return [(h, "".join(s), n) for h, s, n in records]


def read_csv_rows(path: Path | io.StringIO, name: str) -> tuple[list[str], list[dict]]:
    try:
        f = open(path, newline="", encoding="utf-8-sig") if isinstance(path, Path) else path
        with f:
            reader = csv.DictReader(f)
            columns, rows = list(reader.fieldnames or []), list(reader)
    except UnicodeDecodeError as exc:
        if isinstance(path, Path):
            raise not_utf8(path) from None
        raise ZooError(f"{name}: cannot read as a UTF-8 CSV ({exc})") from None
    except (OSError, csv.Error) as exc:
        raise ZooError(f"{name}: cannot read as a UTF-8 CSV ({exc})") from None
    if not columns:
        raise ZooError(f"{name}: empty file (no header row, no rows)")
    return columns, rows


def need_columns(name: str, columns: list[str], wanted: list[str], hint: str) -> None:
    for col in wanted:
        if col not in columns:
            raise ZooError(f"{name}: no column {col!r} (columns: {column_list(columns)}); {hint}")


def load_fasta(cfg: ProteinConfig, path: Path) -> ProteinData:
    seqs, labels, where = [], [], []
    for header, seq, line in read_fasta(path):
        fields = header.split("|")
        w = f"{path} record {header.split()[0] if header else '?'!r} (line {line})"
        try:
            labels.append(fields[cfg.label_field].strip())
        except IndexError:
            raise ZooError(f"{w}: header has no field {cfg.label_field} for the label "
                           "(labels go in the header, '|'-separated; set label_field=)") from None
        seqs.append(check_sequence(seq, w, cfg))
        where.append(w)
    y, task, classes = parse_labels(labels, where, cfg.task)
    return ProteinData(str(path), y, task, seqs=seqs, classes=classes)


def load_csv(cfg: ProteinConfig, path: Path | io.StringIO, name: str, default_target: str = "target") -> ProteinData:
    columns, rows = read_csv_rows(path, name)
    target = cfg.target or default_target
    need_columns(name, columns, [cfg.sequence, target], "set sequence= / target=")
    if not rows:
        raise ZooError(f"{name}: no rows")
    where = [f"{name} row {i + 2}" for i in range(len(rows))]
    seqs = [check_sequence(r[cfg.sequence] or "", w, cfg) for r, w in zip(rows, where)]
    y, task, classes = parse_labels([(r[target] or "").strip() for r in rows], where, cfg.task)
    data = ProteinData(name, y, task, seqs=seqs, classes=classes)
    if "set" in columns:  # FLIP's layout: set = train | test, validation = True marks part of train
        sets = [(r["set"] or "").strip().lower() for r in rows]
        odd = next((i for i, s in enumerate(sets) if s not in ("train", "test")), None)
        if odd is not None:
            raise ZooError(f"{where[odd]}: set is {rows[odd]['set']!r}; expected train or test")
        is_val = np.array([(r.get("validation") or "").strip().lower() == "true" for r in rows])
        is_test = np.array([s == "test" for s in sets])
        train, val, test = (np.where(~is_test & ~is_val)[0], np.where(is_val & ~is_test)[0], np.where(is_test)[0])
        if len(train) == 0 or len(test) == 0:
            raise ZooError(f"{name}: the set column leaves no {'train' if len(train) == 0 else 'test'} rows")
        data.split = (train, val, test)
    return data


def load_npz(cfg: ProteinConfig, path: Path, default_target: str) -> ProteinData:
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ZooError(f"{path}: cannot read as a NumPy .npz file ({exc})") from None
    target = cfg.target or default_target
    for key in ("emb", target):
        if key not in arrays:
            raise ZooError(f"{path}: no array {key!r} (arrays: {column_list(arrays)}); embeddings go in 'emb', "
                           "the label in target=")
    emb, raw = arrays["emb"], arrays[target]
    if emb.ndim != 2 or raw.ndim != 1 or len(emb) != len(raw):
        raise ZooError(f"{path}: 'emb' must be (n, d) and {target!r} (n,); got {emb.shape} and {raw.shape}")
    bad = np.where(~np.isfinite(emb).all(axis=1))[0]
    if len(bad):
        raise ZooError(f"{path}: 'emb' row {bad[0]} has NaN or inf ({len(bad)} rows in all)")
    where = [f"{path} {target}[{i}]" for i in range(len(raw))]
    y, task, classes = parse_labels([str(v) for v in raw.tolist()], where, cfg.task)
    return ProteinData(str(path), y, task, emb=emb.astype(np.float32), classes=classes)


def load_flip(cfg: ProteinConfig, folder: Path) -> ProteinData:
    split = cfg.split or FLIP_DEFAULT
    if split not in FLIP_SPLITS:
        raise ZooError(f"split={split!r}: FLIP GB1 has {', '.join(FLIP_SPLITS)}")
    archive = folder / "splits.zip"
    try:
        with zipfile.ZipFile(archive) as zf:
            text = zf.read(f"splits/{split}.csv").decode("utf-8")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise ZooError(f"{archive}: cannot read splits/{split}.csv ({exc})") from None
    data = load_csv(cfg, io.StringIO(text), f"{archive}:{split}.csv")
    data.name = f"flip-gb1:{split}"
    return data


def esm_example_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fair-esm supervised example's test set (train_test_split, 80/20, random_state=42), with 10% of
    the training rows held out (by the run's seed) for model selection."""
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(np.arange(n), train_size=0.8, random_state=42)
    order = np.random.default_rng(seed).permutation(train)
    n_val = int(round(0.1 * len(train)))
    return np.sort(order[n_val:]), np.sort(order[:n_val]), np.sort(test)


def load_data(cfg: ProteinConfig, run) -> ProteinData:
    if cfg.split and cfg.data != "flip-gb1":
        raise ZooError(f"split={cfg.split!r}: only flip-gb1 has named splits")
    spec = DATASETS.get(cfg.data)
    if spec is not None:
        path = run.data_path(cfg.data)
        kind = spec["kind"]
        if kind == "mutations":
            raise ZooError(f"{cfg.data} is a zero-shot mutation table: use protein/esm-zeroshot")
        if kind == "npz":
            data = load_npz(cfg, path, spec["target"])
        elif kind == "fasta":
            data = load_fasta(cfg, path)
        else:
            data = load_flip(cfg, path)
        data.name = data.name if kind == "flip" else cfg.data
        if spec.get("split") == "esm-example":
            data.split = esm_example_split(len(data.y), run.seed)
    else:
        path = Path(cfg.data).expanduser()
        if not path.is_file():
            raise ZooError(f"{cfg.data}: no such file, and not a dataset name (see `zoo data list`)")
        suffix = path.suffix.lower()
        if suffix in (".fasta", ".fa", ".faa", ".fas"):
            data = load_fasta(cfg, path)
        elif suffix == ".csv":
            data = load_csv(cfg, path, str(path))
        elif suffix == ".npz":
            data = load_npz(cfg, path, "target")
        else:
            raise ZooError(f"{path}: expected a .fasta, .csv or .npz file")
    if data.split is None:
        data.split = random_split(len(data.y), parse_sizes(cfg.split_sizes), run.seed)
    train, val, test = data.split
    if len(val) == 0:  # e.g. FLIP's one_vs_rest marks only 3 validation rows, or none
        raise ZooError(f"{data.name}: no validation rows to select the head on")
    metric, higher = primary_metric(data.task)
    run.set_metric(f"test_{metric}", higher)
    run.log(f"{data.name}: {len(data.y)} {'embeddings' if data.emb is not None else 'sequences'}, {data.task}"
            f"{'' if data.classes is None else ' (' + str(len(data.classes)) + ' classes)'}; "
            f"train {len(train)} / validation {len(val)} / test {len(test)}")
    return data


def parse_sizes(text: str) -> tuple[float, float, float]:
    try:
        sizes = tuple(float(v) for v in text.split(","))
    except ValueError:
        sizes = ()
    if len(sizes) != 3 or any(s <= 0 for s in sizes) or abs(sum(sizes) - 1) > 1e-6:
        raise ZooError(f"split_sizes={text!r}: give three positive fractions that sum to 1, e.g. 0.8,0.1,0.1")
    return sizes


def random_split(n: int, sizes: tuple[float, float, float], seed: int):
    order = np.random.default_rng(seed).permutation(n)
    n_train, n_val = int(round(sizes[0] * n)), int(round(sizes[1] * n))
    return np.sort(order[:n_train]), np.sort(order[n_train:n_train + n_val]), np.sort(order[n_train + n_val:])


# =============================================================================================
# Metrics (scipy, scikit-learn)
# =============================================================================================

def score(y: np.ndarray, pred: np.ndarray, task: str) -> dict[str, float]:
    """Regression: Spearman (primary), Pearson, RMSE. Classification (pred = class scores): accuracy, macro-F1."""
    from scipy import stats
    from sklearn import metrics as skm

    if task == "regression":
        pred = pred.reshape(-1)
        constant = np.ptp(pred) == 0  # a constant prediction has no rank correlation
        return {"spearman": 0.0 if constant else float(stats.spearmanr(y, pred)[0]),
                "pearson": 0.0 if constant else float(stats.pearsonr(y, pred)[0]),
                "rmse": float(np.sqrt(np.mean((y - pred) ** 2)))}
    labels = pred.argmax(axis=1)
    return {"accuracy": float(skm.accuracy_score(y, labels)),
            "macro_f1": float(skm.f1_score(y, labels, average="macro"))}


def primary_metric(task: str) -> tuple[str, bool]:
    return ("spearman", True) if task == "regression" else ("accuracy", True)


# =============================================================================================
# Encodings for protein/onehot
# =============================================================================================

@functools.cache
def blosum62() -> np.ndarray:
    """(21, 20): BLOSUM62 rows of the 20 amino acids over the 20, plus X's row for the other letters; / 4."""
    from Bio.Align import substitution_matrices

    m = substitution_matrices.load("BLOSUM62")
    return np.array([[m[a][b] for b in AMINO] for a in AMINO + "X"], dtype=np.float32) / 4


def encode(seqs: list[str], kind: str) -> np.ndarray:
    """(n, length x 21) one-hot (letters beyond the 20 share a column) or (n, length x 20) BLOSUM62;
    positions are compared as given (variants of one protein), shorter sequences padded with zeros."""
    length = max(len(s) for s in seqs)
    lookup = {a: i for i, a in enumerate(AMINO)}
    idx = np.full((len(seqs), length), -1, dtype=np.int64)
    for i, s in enumerate(seqs):
        idx[i, :len(s)] = [lookup.get(a, 20) for a in s]
    table = np.concatenate([np.eye(21, dtype=np.float32) if kind == "onehot" else blosum62(),
                            np.zeros((1, 21 if kind == "onehot" else 20), dtype=np.float32)])
    return table[idx].reshape(len(seqs), -1)  # index -1 picks the zero row: padding


# =============================================================================================
# Heads on fixed features: ridge and RBF kernel ridge in closed form, an MLP through the core loop
# =============================================================================================

RIDGE_ALPHAS = np.logspace(-2, 5, 22)
KRR_ALPHAS = (0.01, 0.03, 0.1, 0.3, 1.0)
KRR_GAMMAS = (0.25, 0.5, 1.0, 2.0, 4.0)  # x 1 / (median squared distance between training rows)
KRR_MAX_ROWS = 20000  # kernel ridge is O(n^3): past this, head=auto keeps to ridge


@dataclass
class Features:
    """Features standardised (or centred) on the rows they were fitted on; constant columns dropped."""
    keep: np.ndarray
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray, scale: bool) -> Features:
        std = X.std(axis=0)
        keep = np.where(std > 1e-8)[0]
        return cls(keep, X[:, keep].mean(axis=0), std[keep] if scale else np.ones(len(keep), dtype=X.dtype))

    def __call__(self, X: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((X[:, self.keep] - self.mean) / self.std).double()


def targets_matrix(data: ProteinData, idx: np.ndarray) -> tuple[torch.Tensor, float, float]:
    """(n, outputs) centred targets: standardised values, or one-hot classes (least-squares classification)."""
    if data.task == "regression":
        mean, std = float(data.y[idx].mean()), float(data.y[idx].std()) or 1.0
        return torch.from_numpy((data.y[idx] - mean) / std).double().unsqueeze(1), mean, std
    onehot = np.eye(len(data.classes))[data.y[idx]]
    return torch.from_numpy(onehot - onehot.mean(axis=0)).double(), 0.0, 1.0


def rbf(A: torch.Tensor, B: torch.Tensor, gamma: float) -> torch.Tensor:
    return torch.exp(-gamma * torch.cdist(A, B).square())


def median_sq_distance(X: torch.Tensor, seed: int = 0) -> float:
    g = torch.Generator().manual_seed(seed)
    sample = X[torch.randperm(len(X), generator=g)[:1000]]
    d = torch.cdist(sample, sample).square()
    return float(d[d > 0].median()) if (d > 0).any() else 1.0


def select_closed_form(data: ProteinData, X: np.ndarray, scale: bool, kinds: list[str]) -> list[dict]:
    """Every (head, hyperparameter) candidate fitted on train, scored on validation."""
    train, val, _ = data.split
    feats = Features.fit(X[train], scale)
    Xt, Xv = feats(X[train]), feats(X[val])
    Y, mean, std = targets_matrix(data, train)
    out = []
    if "ridge" in kinds:
        U, s, Vh = torch.linalg.svd(Xt, full_matrices=False)
        UtY = U.T @ Y
        for alpha in RIDGE_ALPHAS:
            W = Vh.T @ ((s / (s ** 2 + alpha)).unsqueeze(1) * UtY)
            pred = (Xv @ W).numpy() * std + mean
            out.append({"head": "ridge", "alpha": float(alpha), "val": score(data.y[val], pred, data.task)})
    if "krr" in kinds:
        scale_sq = median_sq_distance(Xt)
        for g in KRR_GAMMAS:
            Kt, Kv = rbf(Xt, Xt, g / scale_sq), rbf(Xv, Xt, g / scale_sq)
            for alpha in KRR_ALPHAS:
                L = torch.linalg.cholesky(Kt + alpha * torch.eye(len(Kt), dtype=Kt.dtype))
                pred = (Kv @ torch.cholesky_solve(Y, L)).numpy() * std + mean
                out.append({"head": "krr", "alpha": alpha, "gamma": g / scale_sq, "gamma_rel": g,
                            "val": score(data.y[val], pred, data.task)})
    return out


def refit_closed_form(data: ProteinData, X: np.ndarray, scale: bool, choice: dict) -> np.ndarray:
    """The chosen head refitted on train + validation; predictions for the test rows."""
    train, val, test = data.split
    fit_idx = np.concatenate([train, val])
    feats = Features.fit(X[fit_idx], scale)
    Xf, Xs = feats(X[fit_idx]), feats(X[test])
    Y, mean, std = targets_matrix(data, fit_idx)
    if choice["head"] == "ridge":
        A = Xf.T @ Xf if Xf.shape[1] <= Xf.shape[0] else None  # primal when features are fewer, else dual
        if A is not None:
            W = torch.linalg.solve(A + choice["alpha"] * torch.eye(len(A), dtype=A.dtype), Xf.T @ Y)
            pred = Xs @ W
        else:
            G = Xf @ Xf.T
            pred = (Xs @ Xf.T) @ torch.linalg.solve(G + choice["alpha"] * torch.eye(len(G), dtype=G.dtype), Y)
    else:
        gamma = choice["gamma_rel"] / median_sq_distance(Xf)
        L = torch.linalg.cholesky(rbf(Xf, Xf, gamma) + choice["alpha"] * torch.eye(len(Xf), dtype=Xf.dtype))
        pred = rbf(Xs, Xf, gamma) @ torch.cholesky_solve(Y, L)
    return pred.numpy() * std + mean


class MLPHead(nn.Module):
    def __init__(self, d_in: int, hidden: int, out: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Dropout(dropout), nn.Linear(d_in, hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def head_loss(pred: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    return F.mse_loss(pred.squeeze(1), y) if task == "regression" else F.cross_entropy(pred, y)


def train_supervised(cfg: ProteinConfig, run, data: ProteinData, model: nn.Module, inputs: torch.Tensor, batch: int,
                     optimizer: torch.optim.Optimizer, device, predict_fn) -> tuple[np.ndarray, dict]:
    """The core loop on (inputs, targets) rows; the best validation state predicts the test rows."""
    train, val, test = data.split
    mean, std = (float(data.y[train].mean()), float(data.y[train].std()) or 1.0) if data.task == "regression" \
        else (0.0, 1.0)
    y = torch.from_numpy((data.y - mean) / std).float() if data.task == "regression" else torch.from_numpy(data.y)
    batches = TensorBatches((inputs[train], y[train]), batch, seed=run.seed)
    metric, higher = primary_metric(data.task)
    best = BestState(higher)

    def unscale(p: np.ndarray) -> np.ndarray:
        return p * std + mean if data.task == "regression" else p

    def evaluate(m: nn.Module) -> dict[str, float]:
        val_metrics = score(data.y[val], unscale(predict_fn(m, inputs[val])), data.task)
        best.update(val_metrics[metric], m)
        return {f"val_{k}": v for k, v in val_metrics.items()}

    def loss_fn(m: nn.Module, b) -> torch.Tensor:
        x, t = b
        return head_loss(m(x.to(device, non_blocking=True)), t.to(device, non_blocking=True), data.task)

    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=0.0)
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr), settings=LoopSettings.of(cfg),
                 keep={"best": best})
    best.restore(model)
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    return unscale(predict_fn(model, inputs[test])), stats


@torch.no_grad()
def predict_rows(model: nn.Module, x: torch.Tensor, device, batch: int = 1024) -> np.ndarray:
    model.eval()
    out = [model(x[i:i + batch].to(device)).float().cpu() for i in range(0, len(x), batch)]
    model.train()
    return torch.cat(out).numpy()


def train_mlp_head(cfg: ProteinConfig, run, data: ProteinData, X: np.ndarray, scale: bool):
    """The MLP through the core loop on the run's budget: (test predictions, loop stats, description)."""
    device = choose_device(run.device)
    inputs = Features.fit(X[data.split[0]], scale)(X).float()
    torch.manual_seed(run.seed)
    out = 1 if data.task == "regression" else len(data.classes)
    model = MLPHead(inputs.size(1), cfg.hidden, out, cfg.dropout).to(device)
    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), lr=cfg.lr or 1e-3)
    pred, stats = train_supervised(cfg, run, data, model, inputs, cfg.batch_size or 64, optimizer, device,
                                   functools.partial(predict_rows, device=device))
    return pred, stats, f"mlp ({inputs.size(1)} -> {cfg.hidden} -> {out})"


def fit_head(cfg: ProteinConfig, run, data: ProteinData, X: np.ndarray, scale: bool) -> dict[str, float]:
    """Fit the configured head on features ``X`` (head=auto: ridge, kernel ridge and the MLP, the best on
    validation kept); returns the test metrics and the run's figures."""
    train, _, test = data.split
    metric = primary_metric(data.task)[0]
    start = time.perf_counter()
    options = []  # (validation value, description, test predictions as a thunk)
    if cfg.head != "mlp":
        kinds = ["ridge", "krr"] if cfg.head == "auto" else [cfg.head]
        if cfg.head == "auto" and len(train) > KRR_MAX_ROWS:
            kinds = ["ridge"]
            run.log(f"{len(train)} training rows: kernel ridge skipped (O(n^3)); head=krr forces it")
        candidates = select_closed_form(data, X, scale, kinds)
        best = max(candidates, key=lambda c: c["val"][metric])
        hp = ", ".join(f"{k} {best[k]:.3g}" for k in ("alpha", "gamma_rel") if k in best)
        run.log(f"closed form: {best['head']} ({hp}) has the best validation {metric}, {best['val'][metric]:.4f}, "
                f"of {len(candidates)} candidates")
        options.append((best["val"][metric], f"{best['head']} ({hp}, refitted on train + validation)",
                        functools.partial(refit_closed_form, data, X, scale, best)))
    stats = {}
    if cfg.head in ("auto", "mlp"):
        pred, stats, what = train_mlp_head(cfg, run, data, X, scale)
        options.append((stats[f"best_val_{metric}"], f"{what}, the best validation state", lambda: pred))
    value, what, predict = max(options, key=lambda o: o[0])
    if len(options) > 1:
        run.log(f"head=auto keeps {what.split(' (')[0]}: validation {metric} {value:.4f} against "
                f"{min(options, key=lambda o: o[0])[0]:.4f}")
    run.report("head", f"{what}; validation {metric} {value:.4f}")
    test_metrics = score(data.y[test], predict(), data.task)
    chose_mlp = what.startswith("mlp")
    return {**{f"test_{k}": v for k, v in test_metrics.items()}, f"val_{metric}": value,
            "train_seconds": time.perf_counter() - start, "params_M": stats.get("params_M") if chose_mlp else None,
            "peak_mem_mb": max(stats.get("peak_mem_mb", 0.0), peak_memory_mb(torch.device("cpu")))}


# =============================================================================================
# ESM-2 weights: fair-esm names (torch hub cache, downloaded when online), a local file, or scratch
# =============================================================================================

ESM_URL = "https://dl.fbaipublicfiles.com/fair-esm/models/{}.pt"
ESM2_MODELS = ("esm2_t6_8M_UR50D", "esm2_t12_35M_UR50D", "esm2_t30_150M_UR50D", "esm2_t33_650M_UR50D",
               "esm2_t36_3B_UR50D", "esm2_t48_15B_UR50D")


def read_esm_file(path: Path) -> tuple[nn.Module, object]:
    """A fair-esm checkpoint ({'cfg': {'model': Namespace}, 'model': state}) read with weights_only=True:
    tensors and the config namespace only, so a file carrying code is refused, not run."""
    import esm

    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = next((line.strip() for line in str(exc).splitlines() if "GLOBAL" in line or "Unsupported" in line),
                      "not a plain weights file")
        raise ZooError(f"{path}: refused to load: {reason[:200]} (weights load with weights_only=True)") from None
    except (OSError, RuntimeError, EOFError) as exc:
        raise ZooError(f"{path}: cannot read as a fair-esm checkpoint ({str(exc).splitlines()[0][:200]})") from None
    if not isinstance(data, dict) or not {"cfg", "model"} <= set(data):
        raise ZooError(f"{path}: not a fair-esm checkpoint (expected a dict with 'cfg' and 'model')")
    name = path.stem if path.stem.startswith(("esm1", "esm2")) else "esm2"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "regression weights not found": the contact head is not used
            model, alphabet = esm.pretrained.load_model_and_alphabet_core(name, data, None)
    except (RuntimeError, AttributeError, KeyError) as exc:
        raise ZooError(f"{path}: does not match the ESM architecture its config names "
                       f"({str(exc).splitlines()[0][:200]})") from None
    return model, alphabet


def load_esm(cfg: ProteinConfig, run) -> tuple[nn.Module, object, str]:
    """(model, alphabet, description): a scratch model, a local file, or a fair-esm name."""
    import esm

    if cfg.esm_model == "scratch":
        torch.manual_seed(run.seed)
        model = esm.model.esm2.ESM2(num_layers=cfg.scratch_layers, embed_dim=cfg.scratch_dim,
                                    attention_heads=cfg.scratch_heads, alphabet="ESM-1b", token_dropout=False)
        return model, model.alphabet, (f"ESM-2 from scratch ({cfg.scratch_layers} layers, width {cfg.scratch_dim}, "
                                       "random init)")
    if cfg.esm_weights:
        path = Path(cfg.esm_weights).expanduser()
        if not path.is_file():
            raise ZooError(f"esm_weights={cfg.esm_weights}: no such file (a fair-esm .pt checkpoint, e.g. "
                           f"{ESM_URL.format(ESM2_MODELS[0])})")
    else:
        if not re.fullmatch(r"esm[\w.]+", cfg.esm_model):
            raise ZooError(f"esm_model={cfg.esm_model!r}: a fair-esm name ({', '.join(ESM2_MODELS)}) or scratch")
        path = Path(torch.hub.get_dir()) / "checkpoints" / f"{cfg.esm_model}.pt"
        if not path.is_file():
            try:
                run.fetch(ESM_URL.format(cfg.esm_model), path, sha256=None, timeout=30)
            except ZooError as exc:
                reason = str(exc).rsplit(": ", 1)[-1]
                raise ZooError(f"ESM weights {cfg.esm_model} are not on this machine and the download failed "
                               f"({reason}): put {cfg.esm_model}.pt in {path.parent}/ or pass esm_weights=PATH.pt"
                               ) from None
    model, alphabet = read_esm_file(path)
    return model, alphabet, f"{path.name} ({model.num_layers} layers, width {model.embed_dim})"


def weights_digest(model: nn.Module) -> str:
    """A content hash of the weights: the embedding cache key, whatever the file is called."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def tokenize(alphabet, seqs: list[str]) -> torch.Tensor:
    """(n, longest + 2) token ids: BOS, residues, EOS, padding."""
    _, _, tokens = alphabet.get_batch_converter()([(str(i), s) for i, s in enumerate(seqs)])
    return tokens


def length_batches(seqs: list[str], toks_per_batch: int) -> list[list[int]]:
    """Indices grouped by length (longest first) so each forward pass holds about toks_per_batch tokens."""
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1) * (len(seqs[current[0]]) + 2) > toks_per_batch:
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current] if current else batches


def pool_tokens(rep: torch.Tensor, tokens: torch.Tensor, alphabet, pool: str) -> torch.Tensor:
    if pool == "bos":
        return rep[:, 0]
    residues = (tokens != alphabet.padding_idx) & (tokens != alphabet.cls_idx) & (tokens != alphabet.eos_idx)
    return (rep * residues.unsqueeze(-1)).sum(1) / residues.sum(1, keepdim=True).clamp(min=1)


def resolve_layer(model: nn.Module, layer: int) -> int:
    if not -model.num_layers - 1 <= layer <= model.num_layers:
        raise ZooError(f"layer={layer}: the model has layers 0..{model.num_layers}")
    return layer % (model.num_layers + 1)


def features_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo" / "features" / "esm"


@torch.inference_mode()
def embed(model: nn.Module, alphabet, seqs: list[str], layer: int, pool: str, device, precision: str,
          toks_per_batch: int, log) -> np.ndarray:
    """(n, width) pooled embeddings, cached on disk per (weights, layer, pool, precision) and sequence:
    a sequence embedded once is never embedded again by the same model, in any dataset."""
    folder = features_root() / f"{weights_digest(model)}-layer{layer}-{pool}-{precision}"
    keys = [hashlib.sha1(s.encode()).hexdigest() for s in seqs]
    found: dict[str, np.ndarray] = {}
    for shard in sorted(folder.glob("shard-*.npz")) if folder.is_dir() else []:
        try:
            with np.load(shard, allow_pickle=False) as f:
                found.update(zip(f["keys"].tolist(), f["emb"]))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            log(f"embedding cache shard {shard} unreadable: ignored (it will be recomputed)")
    todo = sorted({s for s, k in zip(seqs, keys) if k not in found})
    if todo:
        start = time.perf_counter()
        model.eval().to(device)
        new_keys, new_emb = [], []
        for idx in length_batches(todo, toks_per_batch):
            batch = [todo[i] for i in idx]
            tokens = tokenize(alphabet, batch).to(device)
            with autocast(device, precision):
                rep = model(tokens, repr_layers=[layer])["representations"][layer]
            new_emb.append(pool_tokens(rep.float(), tokens, alphabet, pool).cpu().numpy())
            new_keys += [hashlib.sha1(s.encode()).hexdigest() for s in batch]
        emb = np.concatenate(new_emb).astype(np.float32)
        found.update(zip(new_keys, emb))
        folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha1("".join(new_keys).encode()).hexdigest()[:12]
        tmp = folder / f".shard-{name}.{os.getpid()}.npz"
        np.savez(tmp, keys=np.array(new_keys), emb=emb)
        os.replace(tmp, folder / f"shard-{name}.npz")
        log(f"embedded {len(todo)} new sequences in {time.perf_counter() - start:.1f}s "
            f"({len(seqs) - len(todo)} from the cache {folder})")
    else:
        log(f"all {len(seqs)} embeddings from the cache {folder}")
    return np.stack([found[k] for k in keys])


# =============================================================================================
# Fine-tuning: ESM-2 + a head on pooled residues, LoRA (peft) or every weight, layer-wise LR decay
# =============================================================================================

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "out_proj"]


class ESMRegressor(nn.Module):
    """ESM-2 residues pooled (mean or BOS) into an MLP head."""

    def __init__(self, esm_model: nn.Module, alphabet, layer: int, pool: str, out: int, hidden: int, dropout: float):
        super().__init__()
        self.esm, self.alphabet, self.layer, self.pool = esm_model, alphabet, layer, pool
        self.head = MLPHead(esm_model.embed_dim, hidden, out, dropout)  # a peft wrapper forwards the attribute

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        rep = self.esm(tokens, repr_layers=[self.layer])["representations"][self.layer]
        return self.head(pool_tokens(rep, tokens, self.alphabet, self.pool))


def layer_of(name: str, num_layers: int) -> int:
    """Depth of a backbone parameter for layer-wise decay: 0 embeddings, i + 1 block i, top for the rest."""
    m = re.search(r"layers\.(\d+)\.", name)
    if m:
        return int(m.group(1)) + 1
    return 0 if "embed_tokens" in name else num_layers + 1


def finetune_groups(model: ESMRegressor, num_layers: int, lr: float, cfg: ProteinConfig) -> list[dict]:
    """AdamW groups: backbone LR x layer_decay^(depth from the top), no decay on biases/norms/embeddings;
    the head at head_lr."""
    groups: dict[tuple, dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = 0.0 if optim.no_decay(name, p) or "embed_tokens" in name else cfg.weight_decay
        if name.startswith("head."):
            key, group_lr = ("head", decay), cfg.head_lr
        else:
            depth = layer_of(name, num_layers)
            key, group_lr = (depth, decay), lr * cfg.layer_decay ** (num_layers + 1 - depth)
        groups.setdefault(key, {"params": [], "lr": group_lr, "weight_decay": decay})["params"].append(p)
    return list(groups.values())


@torch.no_grad()
def predict_tokens(model: nn.Module, tokens: torch.Tensor, device, precision: str, batch: int) -> np.ndarray:
    model.eval()
    out = []
    for i in range(0, len(tokens), batch):
        with autocast(device, precision):
            out.append(model(tokens[i:i + batch].to(device)).float().cpu())
    model.train()
    return torch.cat(out).numpy()


# =============================================================================================
# Zero-shot: masked marginals
# =============================================================================================

def read_wild_type(text: str) -> str:
    """A FASTA file (its first record) or the sequence itself."""
    path = Path(text).expanduser()
    if path.suffix.lower() in (".fasta", ".fa", ".faa", ".fas") or path.is_file():
        if not path.is_file():
            raise ZooError(f"wt={text}: no such FASTA file")
        return read_fasta(path)[0][1]
    return text


def parse_mutations(text: str, wt: str, offset: int, where: str) -> list[tuple[int, str, str]]:
    """'H24C:A50G' -> [(index into wt, 'H', 'C'), ...], each wild-type letter checked against wt."""
    out = []
    for part in text.strip().split(":"):
        m = re.fullmatch(r"([A-Z])(\d+)([A-Z])", part.strip())
        if not m:
            raise ZooError(f"{where}: mutation {part!r} is not like H24C (or H24C:A50G for several)")
        w, pos, mt = m.group(1), int(m.group(2)), m.group(3)
        i = pos - offset
        if not 0 <= i < len(wt):
            raise ZooError(f"{where}: position {pos} of {part} is outside the wild type "
                           f"({offset}..{offset + len(wt) - 1} with offset={offset})")
        if wt[i] != w:
            raise ZooError(f"{where}: {part} says {w} at {pos} but the wild type has {wt[i]} there (offset={offset})")
        if mt not in AMINO:
            raise ZooError(f"{where}: {part} mutates to {mt!r}, not one of the 20 amino acids")
        out.append((i, w, mt))
    return out


@torch.inference_mode()
def masked_marginals(model: nn.Module, alphabet, wt: str, positions: list[int], device, precision: str,
                     toks_per_batch: int) -> dict[int, torch.Tensor]:
    """Position -> log-probabilities over the alphabet with that position masked (Meier et al. 2021)."""
    model.eval().to(device)
    base = tokenize(alphabet, [wt])[0]
    per_batch = max(1, toks_per_batch // len(base))
    out = {}
    for i in range(0, len(positions), per_batch):
        chunk = positions[i:i + per_batch]
        tokens = base.repeat(len(chunk), 1)
        rows = torch.arange(len(chunk))
        cols = torch.tensor(chunk) + 1  # after BOS
        tokens[rows, cols] = alphabet.mask_idx
        with autocast(device, precision):
            logits = model(tokens.to(device))["logits"].float().cpu()
        logp = torch.log_softmax(logits[rows, cols], dim=-1)
        out.update(zip(chunk, logp))
    return out


# =============================================================================================
# The recipes
# =============================================================================================

def inspect_split(run, data: ProteinData, loop: bool, fine_tune: bool | tuple[str, ...] = False) -> None:
    """The split for ``zoo doctor``: the sequences as strings (or the NPZ's embeddings), validation and test rows
    held out together."""
    train, val, test = data.split

    def rows(idx: np.ndarray) -> tuple:
        return ([data.seqs[i] for i in idx] if data.seqs is not None else data.emb[idx], data.y[idx])

    run.inspect(train=rows(train), val=rows(np.concatenate([val, test])), task=data.task,
                num_classes=None if data.classes is None else len(data.classes), fine_tune=fine_tune, loop=loop)


def mutant_sequence(wt: str, variant: list[tuple[int, str, str]]) -> str:
    """The wild type with the variant's mutations applied (H24C:A50G and A50G:H24C are one sequence)."""
    seq = list(wt)
    for i, _, mt in variant:
        seq[i] = mt
    return "".join(seq)


def finish(metrics: dict, data: ProteinData) -> dict:
    metrics["sequences" if data.seqs is not None else "rows"] = len(data.y)
    return metrics


@recipe("protein/onehot", config=ProteinConfig, benchmark="p62593", metric="test_spearman", higher_is_better=True,
        budget="1m", summary="one-hot or BLOSUM62 per position + ridge / RBF kernel ridge (chosen on validation) "
                             "or an MLP: the no-pretraining floor; Spearman",
        scale_out="single process: a closed-form ridge / kernel ridge or a small MLP head; seconds on one device")
def train_onehot(cfg: ProteinConfig, run) -> dict[str, float]:
    data = load_data(cfg, run)
    if data.seqs is None:
        raise ZooError(f"{data.name}: holds embeddings, not sequences: use protein/esm-embed")
    inspect_split(run, data, loop=cfg.head in ("auto", "mlp"))  # the MLP head trains in the core loop
    X = encode(data.seqs, cfg.encoding)
    run.report("features", f"{X.shape[1]} ({cfg.encoding}, {X.shape[1] // (21 if cfg.encoding == 'onehot' else 20)}"
                           " positions)")
    return finish(fit_head(cfg, run, data, X, scale=False), data)


@recipe("protein/esm-embed", config=EmbedConfig, benchmark="tem1-esm2-8m", metric="test_spearman",
        higher_is_better=True, budget="1m",
        summary="frozen ESM-2 embeddings (cached per sequence) or your own .npz, + ridge / RBF kernel ridge / MLP head",
        scale_out="single process: the embeddings are cached once and the head is a ridge or a small MLP")
def train_esm_embed(cfg: ProteinConfig, run) -> dict[str, float]:
    data = load_data(cfg, run)
    inspect_split(run, data, loop=cfg.head in ("auto", "mlp"))  # the MLP head trains in the core loop
    start = time.perf_counter()
    if data.emb is not None:
        X = data.emb
        run.report("embeddings", f"precomputed, {X.shape[1]} wide, from {data.name}")
    else:
        device = choose_device(run.device)
        model, alphabet, what = load_esm(cfg, run)
        layer = resolve_layer(model, cfg.layer)
        X = embed(model, alphabet, data.seqs, layer, cfg.pool, device, resolve_precision(device, cfg.precision),
                  cfg.toks_per_batch, run.log)
        run.report("embeddings", f"{what}, layer {layer}, {cfg.pool} pooled, {X.shape[1]} wide")
    embed_seconds = time.perf_counter() - start
    metrics = fit_head(cfg, run, data, X, scale=True)
    metrics["embed_seconds"] = embed_seconds
    return finish(metrics, data)


@recipe("protein/esm-finetune", config=ProteinConfig, benchmark="p62593", metric="test_spearman",
        higher_is_better=True, budget="5m",
        summary="ESM-2 + head fine-tuned with LoRA on the attention (peft) or end to end, warmup + cosine, "
                "layer-wise LR decay; esm_model=scratch trains one from random init")
def train_esm_finetune(cfg: ProteinConfig, run) -> dict[str, float]:
    from peft import LoraConfig, get_peft_model

    data = load_data(cfg, run)
    if data.seqs is None:
        raise ZooError(f"{data.name}: holds embeddings, not sequences: use protein/esm-embed")
    device = choose_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    backbone, alphabet, what = load_esm(cfg, run)
    layer, num_layers = resolve_layer(backbone, cfg.layer), backbone.num_layers
    scratch = cfg.esm_model == "scratch"
    mode = "full" if scratch else cfg.finetune
    inspect_split(run, data, loop=True, fine_tune=False if scratch else ("head.net.", "lora_"))  # new tensors
    if mode == "lora":
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=LORA_TARGETS, bias="none")
        backbone = get_peft_model(backbone, lora)
    torch.manual_seed(run.seed)
    out = 1 if data.task == "regression" else len(data.classes)
    model = ESMRegressor(backbone, alphabet, layer, cfg.pool, out, cfg.hidden, cfg.dropout).to(device)
    lr = cfg.lr or (1e-3 if scratch or mode == "lora" else 3e-5)
    optimizer = optim.adamw(finetune_groups(model, num_layers, lr, cfg), lr=lr)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    run.log(f"{what}; {mode}: {trainable / 1e6:.3f}M of {total / 1e6:.2f}M parameters trained, backbone LR {lr:g}"
            f"{f', layer decay {cfg.layer_decay}' if cfg.layer_decay != 1 else ''}, head LR {cfg.head_lr:g}")
    batch = cfg.batch_size or 16
    tokens = tokenize(alphabet, data.seqs)
    pred, stats = train_supervised(
        cfg, run, data, model, tokens, batch, optimizer, device,
        functools.partial(predict_tokens, device=device, precision=precision, batch=batch * 4))
    if mode == "lora":
        model.esm.save_pretrained(run.dir / "adapter")
    torch.save({k: v for k, v in model.state_dict().items() if k.startswith("head.")}, run.dir / "head.pt")
    run.report("model", f"{what}, {mode}{f' r={cfg.lora_r}' if mode == 'lora' else ''}, "
                        f"{trainable / 1e6:.3f}M trained")
    test_metrics = score(data.y[data.split[2]], pred, data.task)
    return finish({**{f"test_{k}": v for k, v in test_metrics.items()},
                   **{k: stats[k] for k in ("train_seconds", "params_M", "peak_mem_mb", "mfu_percent") if k in stats}},
                  data)


@recipe("protein/esm-zeroshot", config=ZeroShotConfig, benchmark="blat-ecolx-dms", metric="test_spearman",
        higher_is_better=True, budget="5m",
        summary="mutation effects without training: ESM-2 masked marginals (log p mutant - log p wild type, "
                "summed over sites); Spearman against measured effects",
        scale_out="single process: inference only (one forward per sequence); batch_size sets the speed")
def score_zeroshot(cfg: ProteinConfig, run) -> dict[str, float]:
    spec = DATASETS.get(cfg.data)
    if spec is not None and spec["kind"] != "mutations":
        raise ZooError(f"{cfg.data} is not a mutation table; protein/esm-zeroshot takes a CSV of mutations "
                       "(e.g. blat-ecolx-dms)")
    if cfg.esm_model == "scratch":
        raise ZooError("esm_model=scratch: zero-shot scores need a pretrained model")
    path = run.data_path(cfg.data) if spec else Path(cfg.data).expanduser()
    if not path.is_file():
        raise ZooError(f"{cfg.data}: no such CSV file, and not a dataset name (see `zoo data list`)")
    target = cfg.target or (spec["target"] if spec else "")
    wt = check_sequence(read_wild_type(cfg.wt) if cfg.wt else (spec or {}).get("wt", ""),
                        f"wild type ({cfg.wt or cfg.data})", cfg) if (cfg.wt or spec) else ""
    if not wt:
        raise ZooError("protein/esm-zeroshot needs the wild type: wt=WT.fasta (or the sequence itself)")
    offset = cfg.offset if (cfg.wt or not spec) else spec["offset"]
    columns, rows = read_csv_rows(path, str(path))
    need_columns(str(path), columns, [cfg.mutant] + ([target] if target else []), "set mutant= / target=")
    if not rows:
        raise ZooError(f"{path}: no rows")
    variants = [parse_mutations(r[cfg.mutant] or "", wt, offset, f"{path} row {i + 2}") for i, r in enumerate(rows)]
    if target:
        values = [(r[target] or "").strip() for r in rows]
        keep = [i for i, v in enumerate(values) if v.lower() not in ("", "nan", "na")]
        y, _, _ = parse_labels([values[i] for i in keep], [f"{path} row {i + 2}" for i in keep], "regression")
    mutants = [mutant_sequence(wt, variants[i]) for i in (keep if target else range(len(rows)))]
    run.inspect(train=(mutants, y) if target else (mutants,), task="regression", loop=False)
    device = choose_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    model, alphabet, what = load_esm(cfg, run)
    start = time.perf_counter()
    logp = masked_marginals(model, alphabet, wt, sorted({i for v in variants for i, _, _ in v}), device, precision,
                            cfg.toks_per_batch)
    scores = np.array([sum(float(logp[i][alphabet.get_idx(mt)] - logp[i][alphabet.get_idx(w)]) for i, w, mt in v)
                       for v in variants])
    seconds = time.perf_counter() - start
    out_rows = [{cfg.mutant: r[cfg.mutant], "score": f"{s:.6f}"} for r, s in zip(rows, scores)]
    with open(run.dir / "scores.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[cfg.mutant, "score"])
        writer.writeheader()
        writer.writerows(out_rows)
    run.report("model", f"{what}, masked marginals at {len(logp)} sites; scores.csv in the run")
    metrics = {"train_seconds": seconds, "variants": len(rows), "peak_mem_mb": peak_memory_mb(device)}
    if target:
        if len(keep) < len(rows):
            run.log(f"{len(rows) - len(keep)} variants without a measured {target!r}: scored, not in the Spearman")
            run.report("unmeasured_variants", len(rows) - len(keep))
        metrics.update({f"test_{k}": v for k, v in score(y, scores[keep], "regression").items()})
    else:
        run.log(f"no target= column: {len(rows)} variants scored, nothing to correlate with")
    return metrics
