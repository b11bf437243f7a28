"""``stream=true`` for both tabular recipes: the table read a chunk at a time (CSV chunks, parquet record batches),
never whole.

A first pass (``scan``) learns what ``data.load_table`` learns from the whole frame: the target and its checks, each
row's content hash (the validation carve: the same rows as ``stream=false``), each column's type, categories and
bad values, and a sample of rows: those with the smallest hash, all of them up to ``SAMPLE_ROWS``. Each split's
imputation and engineered-feature plans are fitted on the sample's training rows (on a table up to that size: the
plans ``stream=false`` fits). Chunks are typed by the run's saved columns (``inference.conform``, as ``zoo predict``
types new rows) and featured by the split's plan (``featured``). XGBoost reads them into ``QuantileDMatrix``es
(``stream_xgb.py``); the MLP trains from the rows encoded on disk (``encoded.py``). In memory at once: a chunk, the
sample and a few numbers a row (target, hash, row number), besides what the model reads.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core import datasets
from recipe_zoo.core.datafiles import column_list
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.splits import hash_unit
from recipe_zoo.recipes.tabular import data, features, inference, protocol

CHUNK_ROWS = 65_536  # rows a chunk
SAMPLE_ROWS = 200_000  # rows the feature plans are fitted on (those of them in the training rows)
SETTINGS = {"chunk_rows": CHUNK_ROWS, "sample_rows": SAMPLE_ROWS, "matrix": "QuantileDMatrix"}

# =============================================================================================
# The file, a chunk at a time
# =============================================================================================


@dataclass
class Source:
    path: Path
    name: str
    target: str = ""  # the dataset's target column, when cfg.target does not name one
    dtypes: dict | None = None  # columns whose type differed between chunks: read as (CSV) or cast to (parquet)

    def chunks(self) -> Iterator:
        """The file's rows, ``CHUNK_ROWS`` at a time; its bad forms are one line naming it (``data.read_file``'s)."""
        import pandas as pd

        with data.table_errors(self.path):
            if self.path.suffix.lower() == ".parquet":
                import pyarrow.parquet as pq

                for batch in pq.ParquetFile(self.path).iter_batches(batch_size=CHUNK_ROWS):
                    frame = batch.to_pandas()
                    yield frame.astype(self.dtypes) if self.dtypes else frame
                return
            sep = "\t" if self.path.suffix.lower() == ".tsv" else ","
            with pd.read_csv(self.path, sep=sep, chunksize=CHUNK_ROWS, dtype=self.dtypes) as reader:
                yield from reader


def source_for(cfg) -> Source:
    tables = data.named_tables()
    if cfg.data in tables and tables[cfg.data]["kind"] == "csv":
        return Source(datasets.locate(cfg.data), cfg.data, tables[cfg.data]["target"])
    if cfg.data in tables:
        files = [name for name, info in tables.items() if info["kind"] == "csv"]
        raise ZooError(f"stream=true reads a .csv, .tsv or .parquet file (or {', '.join(files)}); {cfg.data} is read "
                       "in memory: stream=false")
    path = Path(cfg.data).expanduser()
    if not path.is_file():
        raise ZooError(f"{cfg.data}: no such file, and not a dataset name (see `zoo data list`)")
    if path.suffix.lower() not in (".csv", ".tsv", ".parquet"):
        raise ZooError(f"{path}: expected a .csv, .tsv or .parquet file")
    return Source(path, str(path))


# =============================================================================================
# The first pass: what data.load_table learns from the whole frame
# =============================================================================================

@dataclass
class StreamTable:
    """``data.Table``'s fields for a table that is never whole: ``X`` is the sample's features, ``units`` each row's
    hash along the validation carve (``split.carve_validation`` reads it in place of ``keys``)."""
    name: str
    X: object  # the sample's rows as the model reads them (the schema, the plans, zoo doctor)
    y: np.ndarray
    task: str
    classes: list[str] | None
    test_rows: None
    notes: list[str]
    keys: None
    rows: np.ndarray
    target: str
    units: np.ndarray
    sample: np.ndarray  # the table positions of X's rows, in order
    source: Source
    columns: list[dict]  # the feature columns in inference.schema's form: how every chunk is typed


class Column:
    """One feature column's statistics over the rows with a target, for ``data.prepare_columns``'s decisions."""

    def __init__(self, name: str, named: bool):
        self.name, self.named, self.mode = name, named, None
        self.values: set = set()  # categories (text: every stripped value, '' too)
        self.count = 0  # values present (is_id_like's)
        self.integer, self.increasing, self.last = True, True, None
        self.numeric = self.present = self.words = 0  # text: values that read as numbers, values present, the rest
        self.first_word = self.first_inf = None  # (row position, value)
        self.infs = 0

    def add(self, s, offset: int) -> None:
        import pandas as pd

        if self.named or s.dtype == bool:
            self.mode = "category"
            self.values.update(s.astype("string").dropna().unique())
            return
        if pd.api.types.is_numeric_dtype(s):
            self.mode = "number"
            v = s.to_numpy(np.float64, na_value=np.nan)
            self.note_inf(v, s, offset)
            v = v[~np.isnan(v)]
            self.count += len(v)
            self.integer = self.integer and bool(np.all(v == np.round(v)))
            if len(v):
                self.increasing = self.increasing and bool(np.all(np.diff(v) > 0)) and (
                    self.last is None or v[0] > self.last)
                self.last = v[-1]
            return
        self.mode = "text"
        text = s.astype("string").str.strip()
        numbers = pd.to_numeric(text, errors="coerce")
        present = (text.notna() & (text != "")).to_numpy()
        words = present & numbers.isna().to_numpy()
        self.numeric += int((present & ~words).sum())
        self.present += int(present.sum())
        self.words += int(words.sum())
        if words.any() and self.first_word is None:
            i = int(np.where(words)[0][0])
            self.first_word = (offset + i, text.iloc[i])
        self.note_inf(numbers.to_numpy(np.float64, na_value=np.nan), numbers, offset)
        values = text.dropna()
        self.count += len(values)
        self.values.update(values.unique())

    def note_inf(self, v: np.ndarray, s, offset: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):
            bad = np.where(np.isinf(v.astype(np.float32)))[0]
        self.infs += len(bad)
        if len(bad) and self.first_inf is None:
            self.first_inf = (offset + int(bad[0]), s.iloc[bad[0]])

    def decide(self, name: str, notes: list[str]) -> dict | None:
        """The column as ``data.prepare_columns`` types it (``inference.schema``'s form), None when dropped as an
        id (noted), or its error."""
        if self.mode == "category":
            return {"name": self.name, "kind": "category", "categories": sorted(self.values), "strip": not self.named}
        if self.mode == "number" and self.count >= 20 and self.integer and self.increasing:
            notes.append(f"column {self.name!r} looks like an id (all distinct integers in order): dropped")
            return None
        if self.mode == "text":
            share = self.numeric / max(1, self.present)
            if 0.5 <= share < 1.0:
                row, value = self.first_word
                raise ZooError(f"{name}: column {self.name!r} mixes numbers and text: {self.words} of {self.present} "
                               f"values are not numbers (first: row {row + 2}, {value!r}); fix them, or list the "
                               "column in categorical=")
            if share < 1.0:
                if self.count >= 20 and len(self.values) == self.count:
                    notes.append(f"column {self.name!r} looks like an id (a distinct value in every row): dropped")
                    return None
                return {"name": self.name, "kind": "category", "categories": sorted(self.values - {""}),
                        "strip": True}
        if self.first_inf is not None:
            row, value = self.first_inf
            raise ZooError(f"{name} row {row + 2}: column {self.name!r} is {value}, not a finite (float32) number "
                           f"({self.infs} rows in all); fix them, or drop={self.name}")
        return {"name": self.name, "kind": "number"}


class Sample:
    """The rows whose hash (salt ``sample``) is among the ``size`` smallest: a function of the rows alone, in any
    order and any chunking; every row of a table up to ``size`` rows."""

    def __init__(self, size: int):
        self.size, self.parts, self.count, self.limit = size, [], 0, 1.0

    def add(self, frame, positions: np.ndarray, units: np.ndarray) -> None:
        keep = units < self.limit
        if keep.any():
            part = frame[keep].copy()
            part["__position"], part["__unit"] = positions[keep], units[keep]
            self.parts.append(part)
            self.count += int(keep.sum())
        if self.count > 2 * self.size:
            self.trim()

    def trim(self) -> None:
        import pandas as pd

        frame = pd.concat(self.parts).nsmallest(self.size, "__unit")
        self.parts, self.count = [frame], len(frame)
        if len(frame) == self.size:
            self.limit = float(frame["__unit"].max())

    def rows(self) -> tuple:
        """(the sampled rows as read, in table order; their table positions)."""
        self.trim()
        frame = self.parts[0].sort_values("__position")
        return frame.drop(columns=["__position", "__unit"]).reset_index(drop=True), frame["__position"].to_numpy()


class Scan:
    """One pass over the rows: ``add`` each chunk, then ``table``."""

    def __init__(self, cfg, source: Source):
        self.cfg, self.name, self.target = cfg, source.name, cfg.target or source.target
        self.kinds: dict[str, set] = {}
        self.y, self.units, self.rows, self.columns = [], [], [], {}
        self.read = self.kept = 0
        self.sample = Sample(SAMPLE_ROWS)

    def first(self, frame) -> None:
        """The header's checks, as ``data.read_frame`` and ``data.load_table`` make them."""
        if not self.target:
            raise ZooError(f"{self.name}: say which column to predict: target=COLUMN (columns: {column_list(frame)})")
        if self.target not in frame:
            raise ZooError(f"{self.name}: no column {self.target!r} (columns: {column_list(frame.columns)}); set "
                           "target=")
        for col in data.columns_list(self.cfg.drop) + data.columns_list(self.cfg.categorical):
            if col not in frame:
                raise ZooError(f"{self.name}: drop/categorical names {col!r}, not a column "
                               f"(columns: {column_list(frame.columns)})")
        named, dropped = set(data.columns_list(self.cfg.categorical)), {self.target, *data.columns_list(self.cfg.drop)}
        self.columns = {c: Column(c, c in named) for c in frame.columns if c not in dropped}

    def add(self, frame) -> None:
        frame.columns = [str(c) for c in frame.columns]
        if not self.read:
            self.first(frame)
        for c in frame.columns:
            self.kinds.setdefault(c, set()).add(frame[c].dtype.kind if frame[c].dtype.kind in "biuf" else "O")
        self.y.append(frame[self.target])
        rows = np.arange(self.read, self.read + len(frame))
        self.read += len(frame)
        keep = frame[self.target].notna().to_numpy()
        frame, rows = frame[keep].reset_index(drop=True), rows[keep]
        keys = data.row_keys(frame)
        self.units.append(np.array([hash_unit(k) for k in keys], dtype=np.float64))
        self.rows.append(rows)
        positions = self.kept + np.arange(len(frame))
        self.sample.add(frame, positions, np.array([hash_unit(k, "sample") for k in keys], dtype=np.float64))
        for c, column in self.columns.items():
            column.add(frame[c], self.kept)
        self.kept += len(frame)

    def mixed(self) -> dict:
        """Columns whose type differed between chunks, and the type the whole file reads them as."""
        return {c: ("float64" if k <= set("iuf") else "object") for c, k in self.kinds.items() if len(k) > 1}

    def table(self, source: Source, run) -> StreamTable:
        """``data.load_table``'s checks, decisions and notes, in its order."""
        import pandas as pd

        name, target = self.name, self.target
        if not self.read:
            raise ZooError(f"{name}: no rows")
        y_all = pd.concat(self.y, ignore_index=True)
        data.check_target(y_all, self.cfg.task, name, target)
        missing = y_all.isna().to_numpy()
        notes: list[str] = []
        if missing.any():
            if self.cfg.target_nan == "error":
                raise ZooError(f"{name}: {int(missing.sum())} rows have no {target!r} (first: row "
                               f"{int(np.where(missing)[0][0]) + 2}); fill them in or set target_nan=drop")
            notes.append(f"{int(missing.sum())} rows without a target dropped")
            run.report("target_nan_dropped", int(missing.sum()))
        columns = [c for c in (col.decide(name, notes) for col in self.columns.values()) if c is not None]
        if not columns:
            raise ZooError(f"{name}: no feature columns left to learn from")
        y, task, classes = data.encode_target(y_all[~missing].reset_index(drop=True), self.cfg.task, name)
        raw, positions = self.sample.rows()
        X = inference.conform(raw, columns, name)
        return StreamTable(name, X, y, task, classes, None, notes, None, np.concatenate(self.rows), target,
                           np.concatenate(self.units), positions, source, columns)


def read(cfg, run) -> StreamTable:
    """The first pass (a second one when a column's type differed between chunks, with its type fixed: the
    content keys must be those of the whole file read at once)."""
    source = source_for(cfg)
    start = time.perf_counter()
    scan = Scan(cfg, source)
    for frame in source.chunks():
        scan.add(frame)
    if scan.mixed():
        source.dtypes = scan.mixed()
        run.log(f"{source.name}: column types differ between chunks ({', '.join(source.dtypes)}): read again as the "
                "whole file reads them")
        scan = Scan(cfg, source)
        for frame in source.chunks():
            scan.add(frame)
    seconds = time.perf_counter() - start
    run.log(f"stream: {source.name}: {scan.read} rows scanned in {seconds:.1f} s ({scan.read / seconds:,.0f} rows/s, "
            f"{CHUNK_ROWS} a chunk)")
    return scan.table(source, run)


def prepare(cfg, run) -> tuple[StreamTable, list]:
    """``protocol.prepare`` for a streamed table: its splits (``split.csv``) and each split's features, fitted on the
    sample's training rows: (sample features, training rows, validation rows, test rows, feature plan)."""
    table = read(cfg, run)
    detail = f"; feature plans fitted on {len(table.sample)} sampled rows"
    return table, protocol.split_views(cfg, run, table, functools.partial(sample_rows, table), detail)


def sample_rows(table: StreamTable, fit: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A split's rows in the sample (positions in ``table.X``): its training and validation rows, in
    ``protocol.prepare``'s order, and its neighbour bank."""
    train = np.concatenate([fit, val])
    train = np.searchsorted(table.sample, train[np.isin(train, table.sample)])
    return train, np.searchsorted(table.sample, bank_rows(table, fit))


def inspect_split(run, table: StreamTable, views: list, loop: bool, fine_tune: bool = False) -> None:
    """``zoo doctor`` on the sample's training and validation rows."""
    if not run.inspecting:
        return
    X, fit, val, test, plan = views[0]
    inside = lambda rows: np.where(np.isin(table.sample, rows))[0]  # noqa: E731
    protocol.inspect_split(run, dataclasses.replace(table, y=table.y[table.sample]),
                           [(X, inside(fit), inside(val), inside(test), plan)], loop=loop, fine_tune=fine_tune)


# =============================================================================================
# The rows again, featured as the split's models read them
# =============================================================================================

def bank_rows(table: StreamTable, fit: np.ndarray) -> np.ndarray:
    """The table positions of a split's neighbour bank (``neighbours.py``): its fitting rows in the sample, in order."""
    return fit[np.isin(fit, table.sample)]


def featured(table: StreamTable, plan: dict, rows: np.ndarray, bank: np.ndarray) -> Iterator:
    """One pass: (features, table positions) of the chunks' rows among ``rows`` (sorted), typed by the run's columns
    and featured by the split's plan, as ``zoo predict`` prepares rows; a row of ``bank`` (the plan's neighbour bank,
    table positions) is left out of its own neighbours, as in memory."""
    start, rows = 0, np.asarray(rows) if len(rows) else np.array([-1])
    order = np.argsort(bank)
    for frame in table.source.chunks():
        frame.columns = [str(c) for c in frame.columns]
        frame = frame[frame[table.target].notna().to_numpy()]
        positions = np.arange(start, start + len(frame))
        start += len(frame)
        at = np.minimum(np.searchsorted(rows, positions), len(rows) - 1)
        wanted = rows[at] == positions
        if wanted.any():
            X = inference.conform(frame[wanted], table.columns, table.name)
            at = np.minimum(np.searchsorted(bank, positions[wanted], sorter=order), max(len(bank) - 1, 0))
            own = np.where(bank[order[at]] == positions[wanted], order[at], -1) if len(bank) else None
            yield features.apply_features(X, plan, own=own), positions[wanted]
