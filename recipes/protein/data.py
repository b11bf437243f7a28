"""Protein data: sequences and their checks; FASTA, CSV, NPZ-of-embeddings and FLIP readers; the registered
datasets; splits (hash-chosen by sequence, or by position) and how predictions are scored; the one-hot / BLOSUM62
encodings; mutation strings and the mutant sequences they spell."""
from __future__ import annotations

import csv
import functools
import io
import math
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core.datafiles import column_list, not_utf8
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.metrics import bootstrap, rank_correlation, score, tie_tolerance, tied_ranks
from recipe_zoo.recipes.protein.config import FLIP_DEFAULT, ProteinConfig
from recipe_zoo.recipes.protein.split import (esm_example_split, hash_split, item_keys, mutation_positions,
                                              parse_sizes, position_split, positions_of)

# =============================================================================================
# Reading sequences: FASTA, CSV, NPZ embeddings, FLIP splits
# =============================================================================================

AMINO = "ACDEFGHIKLMNPQRSTVWY"
EXTRA = "XBZUO"  # unknown, ambiguous (B, Z), selenocysteine, pyrrolysine: in ESM's alphabet too
FLIP_SPLITS = ("one_vs_rest", "two_vs_rest", "three_vs_rest", "low_vs_high", "sampled")
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
    split_text: str = ""  # what the split is, for the run's summary
    keys: list | None = None  # each item's split key: its sequence (an NPZ row: its embedding's bytes)
    positions: list[tuple[int, ...]] | None = None  # the mutated positions of each item, where the data says them
    skipped: int = 0
    ids: list[str] | None = None  # each item's name for predictions.csv: its FASTA header, or its CSV mutant
    reference: str | None = None  # the consensus the positions were read against (variant sequences, no mutant column)


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
    seqs, labels, where, ids = [], [], [], []
    for header, seq, line in read_fasta(path):
        ids.append(header)
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
    return ProteinData(str(path), y, task, seqs=seqs, classes=classes, ids=ids)


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
    if cfg.mutant in columns:  # H24C or H24C:A50G: the positions split=positions and protein/position-mean use
        data.positions = [mutation_positions(r[cfg.mutant] or "", w) for r, w in zip(rows, where)]
        data.ids = [r[cfg.mutant] or "" for r in rows]
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
        data.split_text = "as the file gives it (set = train | test; validation = its validation column)"
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
    data = ProteinData(str(path), y, task, emb=emb.astype(np.float32), classes=classes)
    if "pos" in arrays and arrays["pos"].shape == raw.shape:  # the mutated position of each row (tem1-esm2-8m)
        data.positions = [(int(p),) for p in arrays["pos"].tolist()]
    return data


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
    data.split_text = f"FLIP GB1 {split} as FLIP gives it (validation = its validation column)"
    return data


def load_data(cfg: ProteinConfig, run) -> ProteinData:
    """The data and its three-way split (made and recorded here; nothing reads the test rows' labels until the
    recipe scores its final model)."""
    if cfg.split not in ("", "positions") and cfg.data != "flip-gb1":
        raise ZooError(f"split={cfg.split!r}: only flip-gb1 has named splits (any data takes split=positions)")
    own_split = cfg.data == "flip-gb1" or (DATASETS.get(cfg.data, {}).get("split") and cfg.split != "positions")
    if own_split and cfg.split_sizes != ProteinConfig.split_sizes:
        raise ZooError(f"split_sizes={cfg.split_sizes!r}: {cfg.data} has its own split (split_sizes applies to "
                       "hash-chosen splits and split=positions)")
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
    data.keys = item_keys(data)
    if cfg.split == "positions":
        sizes = parse_sizes(cfg.split_sizes)
        data.split = position_split(positions_of(data), sizes)
        data.split_text = (f"whole positions held out ({sizes[0]:g}/{sizes[1]:g}/{sizes[2]:g} of the positions, "
                           "by a hash of the position)")
    elif spec is not None and spec.get("split") == "esm-example":
        data.split = esm_example_split(data.keys)
        data.split_text = ("the fair-esm example's test (80/20, random_state 42); validation 10% of its train, "
                           "by a hash of the sequence")
    elif data.split is None:
        sizes = parse_sizes(cfg.split_sizes)
        data.split = hash_split(data.keys, sizes)
        data.split_text = (f"random {sizes[0]:g}/{sizes[1]:g}/{sizes[2]:g}, chosen by a hash of each "
                           f"{'sequence' if data.seqs is not None else 'embedding'} (duplicates share a side)")
    train, val, test = data.split
    if len(val) == 0 or len(train) == 0:  # e.g. FLIP's one_vs_rest marks only 3 validation rows, or none
        distinct = len(set(data.keys))
        why = f" ({len(data.keys)} items but {distinct} distinct: copies share a side)" if distinct < 10 else ""
        raise ZooError(f"{data.name}: no {'validation' if len(train) else 'training'} rows to select the head on"
                       f"{why}")
    metric, higher = primary_metric(data.task)
    run.set_metric(f"test_{metric}", higher)
    sizes_text = f"train {len(train)} / validation {len(val)} / test {len(test)}"
    run.log(f"{data.name}: {len(data.y)} {'embeddings' if data.emb is not None else 'sequences'}, {data.task}"
            f"{'' if data.classes is None else ' (' + str(len(data.classes)) + ' classes)'}; {sizes_text}")
    data.split_text = f"{data.split_text}: {sizes_text}"
    return data


# =============================================================================================
# Metrics (the core's metrics.score), and the split as zoo doctor and the summary see it
# =============================================================================================

# task -> (the core's task, the metrics reported): regression Spearman (primary), Pearson, RMSE; classification
# (predictions are (n, classes) scores) accuracy (primary), macro-F1
SCORING = {"regression": ("regression", ("spearman", "pearson", "rmse")),
           "classification": ("multiclass", ("accuracy", "macro_f1"))}


def primary_metric(task: str) -> tuple[str, bool]:
    return ("spearman", True) if task == "regression" else ("accuracy", True)


def show_split(run, data: ProteinData, loop: bool, fine_tune: bool | tuple[str, ...] = False) -> None:
    """The split into the run: ``split.csv`` (row numbers), the summary's split line, and for ``zoo doctor`` the
    sequences as strings (or the NPZ's embeddings) of train and validation, never test."""
    train, val, test = data.split
    run.record_split({"train": train.tolist(), "validation": val.tolist(), "test": test.tolist()})
    run.report("split", data.split_text)

    def rows(idx: np.ndarray) -> tuple:
        return ([data.seqs[i] for i in idx] if data.seqs is not None else data.emb[idx], data.y[idx])

    run.inspect(train=rows(train), val=rows(val), task=data.task,
                num_classes=None if data.classes is None else len(data.classes), fine_tune=fine_tune, loop=loop)


def metric_statistic(y: np.ndarray, pred: np.ndarray, task: str):
    """The primary metric on a resample of the items (``indices``), for the bootstrap: Spearman (ranked as
    ``metrics.spearman`` ranks, values equal up to floating-point noise tied, with the whole test set's
    tolerance in every resample; 0 for a constant prediction) or accuracy."""
    if task != "regression":
        correct = (np.asarray(pred).argmax(axis=1) == y).astype(np.float64)
        return lambda idx: float(correct[idx].mean())
    pred, y = np.asarray(pred).reshape(-1), np.asarray(y)
    tol_pred, tol_y = tie_tolerance(pred), tie_tolerance(y)

    def rho(idx: np.ndarray) -> float:
        return rank_correlation(tied_ranks(y[idx], tol_y), tied_ranks(pred[idx], tol_pred))

    return rho


def final_metrics(data: ProteinData, val_value: float, test_pred: np.ndarray) -> dict[str, float]:
    """The test metrics of the final model (scored once, here), its validation value and the primary metric's 95%
    bootstrap interval over the test items."""
    test = data.split[2]
    metric = primary_metric(data.task)[0]
    out = {f"test_{k}": v for k, v in score(data.y[test], test_pred, *SCORING[data.task]).items()}
    out[f"val_{metric}"] = val_value
    low, high = bootstrap(metric_statistic(data.y[test], test_pred, data.task), len(test))
    out[f"test_{metric}_ci_low"], out[f"test_{metric}_ci_high"] = low, high
    return out


def finish(metrics: dict, data: ProteinData) -> dict:
    metrics["sequences" if data.seqs is not None else "rows"] = len(data.y)
    return metrics


# =============================================================================================
# Encodings for protein/onehot
# =============================================================================================

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


# =============================================================================================
# Mutations for protein/esm-zeroshot: the wild type, H24C:A50G strings, mutant sequences
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


def mutant_sequence(wt: str, variant: list[tuple[int, str, str]]) -> str:
    """The wild type with the variant's mutations applied (H24C:A50G and A50G:H24C are one sequence)."""
    seq = list(wt)
    for i, _, mt in variant:
        seq[i] = mt
    return "".join(seq)


# =============================================================================================
# Files given to predict
# =============================================================================================

FASTA_SUFFIXES = (".fasta", ".fa", ".faa", ".fas")


def recipe_name(run, default: str) -> str:
    """The name the run was trained under (a `zoo new` copy has its own), else the recipe's."""
    return getattr(getattr(run, "spec", None), "name", None) or default


def data_file(text: str, run, what: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file() and run.is_dataset(text):
        path = run.data_path(text)
    if not path.is_file():
        raise ZooError(f"data={text}: no such file ({what})")
    return path
