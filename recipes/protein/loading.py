"""A protein run's data: a dataset declared in ``datasets.py`` or a file of the user's (FASTA with the label in the
header, CSV, an NPZ of embeddings, FLIP's split CSVs) read into ``ProteinData``, and its three-way split chosen
(the data's own, hash-chosen by sequence, or whole positions held out), then shown to the run: ``split.csv``, the
summary's split line, and ``zoo doctor``'s look at train and validation."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from recipe_zoo.core import datasets
from recipe_zoo.core.datafiles import column_list
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.protein import datasets as _datasets  # noqa: F401  (declares the domain's datasets)
from recipe_zoo.recipes.protein.config import FLIP_DEFAULT, ProteinConfig
from recipe_zoo.recipes.protein.mutations import mutation_positions
from recipe_zoo.recipes.protein.readers import FASTA_SUFFIXES, need_columns, read_csv_rows, read_fasta
from recipe_zoo.recipes.protein.scoring import primary_metric
from recipe_zoo.recipes.protein.sequences import ProteinData, check_sequence, parse_labels
from recipe_zoo.recipes.protein.split import (esm_example_split, hash_split, item_keys, parse_sizes, position_split,
                                              positions_of)


def dataset_info(name: str) -> dict | None:
    """What the recipes read of a protein dataset (its kind, target, own split, wild type); None for any other name
    (a file of the user's)."""
    if not datasets.is_dataset(name) or datasets.get(name).domain != "protein":
        return None
    return datasets.get(name).info


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
        seqs.append(check_sequence(seq, w, cfg, crop=False))
        where.append(w)
    y, task, classes = parse_labels(labels, where, cfg.task)
    return ProteinData(str(path), y, task, seqs=[s[:cfg.max_len] for s in seqs], classes=classes, ids=ids,
                       uncropped=seqs)


def load_csv(cfg: ProteinConfig, path: Path | io.StringIO, name: str, default_target: str = "target") -> ProteinData:
    columns, rows = read_csv_rows(path, name)
    target = cfg.target or default_target
    need_columns(name, columns, [cfg.sequence, target], "set sequence= / target=")
    if not rows:
        raise ZooError(f"{name}: no rows")
    where = [f"{name} row {i + 2}" for i in range(len(rows))]
    seqs = [check_sequence(r[cfg.sequence] or "", w, cfg, crop=False) for r, w in zip(rows, where)]
    y, task, classes = parse_labels([(r[target] or "").strip() for r in rows], where, cfg.task)
    data = ProteinData(name, y, task, seqs=[s[:cfg.max_len] for s in seqs], classes=classes, uncropped=seqs)
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
    split, named = cfg.split or FLIP_DEFAULT, dataset_info("flip-gb1")["splits"]
    if split not in named:
        raise ZooError(f"split={split!r}: FLIP GB1 has {', '.join(named)}")
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
    spec = dataset_info(cfg.data)
    if cfg.split not in ("", "positions") and cfg.data != "flip-gb1":
        raise ZooError(f"split={cfg.split!r}: only flip-gb1 has named splits (any data takes split=positions)")
    own_split = cfg.data == "flip-gb1" or ((spec or {}).get("split") and cfg.split != "positions")
    if own_split and cfg.split_sizes != ProteinConfig.split_sizes:
        raise ZooError(f"split_sizes={cfg.split_sizes!r}: {cfg.data} has its own split (split_sizes applies to "
                       "hash-chosen splits and split=positions)")
    if spec is not None:
        path = datasets.locate(cfg.data)
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
        if suffix in FASTA_SUFFIXES:
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
