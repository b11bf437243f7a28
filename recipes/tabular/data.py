"""Reading the table (pandas) and its bad inputs, the target's checks and encoding, the metrics, sample weights
and the log-target choice. The named tables are declared in ``datasets.py``; the splits are ``split.py``'s, each
split's features and the loop over splits both recipes share ``protocol.py``'s.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core import datasets
from recipe_zoo.core.datafiles import column_list, not_utf8
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.metrics import score
from recipe_zoo.core.splits import content_key
from recipe_zoo.recipes.tabular import datasets as _datasets  # noqa: F401  (declares the domain's datasets)
from recipe_zoo.recipes.tabular.config import TabularConfig

# =============================================================================================
# Reading the table
# =============================================================================================


@dataclass
class Table:
    name: str
    X: object  # pandas DataFrame of features (categoricals as pandas 'category')
    y: np.ndarray  # float targets, or class indices
    task: str  # regression | binary | multiclass
    classes: list[str] | None
    test_rows: np.ndarray | None  # rows of a given test file (adult); None = split by split_seed
    notes: list[str]
    keys: list[bytes]  # each row's content key (all its cells, target included): its side of the validation carve
    rows: np.ndarray  # each row's number in the table as read (before rows without a target were dropped)
    target: str = ""  # the target column's name


def columns_list(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def named_tables() -> dict[str, dict]:
    """The tables the recipes read by name (``datasets.py``), each with what they read of it: its ``info``
    (``kind``: how it is read, ``target``: the column to predict, ...)."""
    return {name: d.info for name, d in datasets.DATASETS.items() if d.domain == "tabular" and "kind" in d.info}


def read_frame(cfg: TabularConfig):
    """(frame, target column, rows of a given test file or None, name)."""
    info = named_tables().get(cfg.data)
    if info is not None:
        frame, test_rows = read_dataset(cfg.data, info)
        return frame, info["target"], test_rows, cfg.data
    path = Path(cfg.data).expanduser()
    if not path.is_file():
        raise ZooError(f"{cfg.data}: no such file, and not a dataset name (see `zoo data list`)")
    frame = read_file(path)
    if not cfg.target:
        raise ZooError(f"{path}: say which column to predict: target=COLUMN (columns: {column_list(frame)})")
    return frame, cfg.target, None, str(path)


def read_dataset(name: str, info: dict) -> tuple:
    """(frame, rows of its test file or None) of a declared table, by its ``kind``."""
    import pandas as pd

    if info["kind"] == "csv":
        return pd.read_csv(datasets.locate(name)), None
    if info["kind"] == "adult":
        folder, target = datasets.locate(name), info["target"]
        parts = [pd.read_csv(folder / f, header=None, names=list(info["columns"]), sep=r",\s*", engine="python",
                             na_values="?", skip_blank_lines=True, comment="|") for f in ("adult.data", "adult.test")]
        parts[1][target] = parts[1][target].str.rstrip(".")  # the test file's labels end with a period
        frame = pd.concat(parts, ignore_index=True)
        return frame, np.arange(len(parts[0]), len(frame))
    import sklearn.datasets

    return getattr(sklearn.datasets, info["loader"])(as_frame=True).frame, None


@contextlib.contextmanager
def table_errors(path: Path):
    """A table file's bad forms, as one line naming it (read whole here, or a chunk at a time by ``stream.py``)."""
    import pandas as pd

    try:
        yield
    except pd.errors.EmptyDataError:
        raise ZooError(f"{path}: empty file (no header row, no rows)") from None
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ZooError(f"{path}: cannot read the table ({first[:200]})") from None


def read_file(path: Path):
    """A .csv, .tsv or .parquet file as a frame; its bad forms are one line naming it."""
    import pandas as pd

    with table_errors(path):
        if path.suffix.lower() == ".parquet":
            frame = pd.read_parquet(path)
        elif path.suffix.lower() in (".csv", ".tsv"):
            frame = pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",")
        else:
            raise ZooError(f"{path}: expected a .csv, .tsv or .parquet file")
    if frame.empty:
        raise ZooError(f"{path}: no rows")
    return frame


def load_table(cfg: TabularConfig, run) -> Table:
    frame, target, test_rows, name = read_frame(cfg)
    frame.columns = [str(c) for c in frame.columns]
    target = cfg.target or target
    notes: list[str] = []
    if target not in frame:
        raise ZooError(f"{name}: no column {target!r} (columns: {column_list(frame.columns)}); set target=")
    for col in columns_list(cfg.drop) + columns_list(cfg.categorical):
        if col not in frame:
            raise ZooError(f"{name}: drop/categorical names {col!r}, not a column "
                           f"(columns: {column_list(frame.columns)})")
    check_target(frame[target], cfg.task, name, target)
    missing = frame[target].isna().to_numpy()
    rows = np.arange(len(frame))
    if missing.any():
        first = int(np.where(missing)[0][0])
        if cfg.target_nan == "error":
            raise ZooError(f"{name}: {int(missing.sum())} rows have no {target!r} (first: row {first + 2}); "
                           "fill them in or set target_nan=drop")
        keep = np.where(~missing)[0]
        if test_rows is not None:
            test_rows = np.searchsorted(keep, np.intersect1d(keep, test_rows))
        frame = frame.iloc[keep].reset_index(drop=True)
        rows = keep
        notes.append(f"{int(missing.sum())} rows without a target dropped")
        run.report("target_nan_dropped", int(missing.sum()))
    keys = row_keys(frame)
    y_raw = frame.pop(target)
    frame = frame.drop(columns=columns_list(cfg.drop))
    X = prepare_columns(frame, set(columns_list(cfg.categorical)), name, notes)
    y, task, classes = encode_target(y_raw, cfg.task, name)
    return Table(name, X, y, task, classes, test_rows, notes, keys, rows, target)


def row_keys(frame) -> list[bytes]:
    """Each row's ``content_key``: its cells as read, as text between separators. A function of the row alone (not
    of its place in the file, the other rows or the seed), so equal rows get equal keys."""
    cells = [[str(v) for v in frame[c].to_numpy(object)] for c in frame.columns]
    return [content_key("\x1f".join(row).encode()) for row in zip(*cells)]


def check_target(s, task: str, name: str, target: str) -> None:
    """The target's bad rows, named: an infinite number; a word among numbers (a typo more often than a
    class: set task=multiclass when the words are classes); any word when task=regression."""
    import pandas as pd

    present = s.notna().to_numpy()
    if pd.api.types.is_numeric_dtype(s):
        bad = np.where(present & ~np.isfinite(s.to_numpy(np.float64, na_value=np.nan)))[0]
        if len(bad):
            raise ZooError(f"{name} row {bad[0] + 2}: target {target!r} is {s.iloc[bad[0]]}, not a finite number "
                           f"({len(bad)} rows in all)")
        return
    if task in ("binary", "multiclass"):
        return
    text = s.astype("string").str.strip()
    words = present & pd.to_numeric(text, errors="coerce").isna().to_numpy()
    if words.any() and (task == "regression" or 2 * int(words.sum()) <= int(present.sum())):
        first = int(np.where(words)[0][0])
        raise ZooError(f"{name} row {first + 2}: target {target!r} is {text.iloc[first]!r}, not a number "
                       f"({int(words.sum())} of {int(present.sum())} values are text); fix them"
                       + ("" if task == "regression" else ", or set task=multiclass if they are class names"))


def prepare_columns(frame, categorical: set[str], name: str, notes: list[str]):
    """Numbers stay numbers (NaN left to the model); text and named columns become pandas categories;
    a column that mixes numbers and words is an error; id-like columns are dropped and reported."""
    import pandas as pd

    out = {}
    for col in frame.columns:
        s = frame[col]
        if col in categorical or s.dtype == bool:
            out[col] = s.astype("string").astype("category")
            continue
        if pd.api.types.is_numeric_dtype(s):
            if is_id_like(s, numeric=True):
                notes.append(f"column {col!r} looks like an id (all distinct integers in order): dropped")
                continue
            out[col] = finite_feature(s, col, name)
            continue
        text = s.astype("string").str.strip()
        numbers = pd.to_numeric(text, errors="coerce")
        present = text.notna() & (text != "")
        numeric_share = float((numbers.notna() & present).sum()) / max(1, int(present.sum()))
        if 0.5 <= numeric_share < 1.0:
            bad = np.where(present & numbers.isna())[0]
            raise ZooError(f"{name}: column {col!r} mixes numbers and text: {len(bad)} of {int(present.sum())} "
                           f"values are not numbers (first: row {bad[0] + 2}, {text.iloc[bad[0]]!r}); fix them, "
                           "or list the column in categorical=")
        if numeric_share == 1.0:
            out[col] = finite_feature(numbers, col, name)
            continue
        if is_id_like(text, numeric=False):
            notes.append(f"column {col!r} looks like an id (a distinct value in every row): dropped")
            continue
        out[col] = text.where(present).astype("category")
    if not out:
        raise ZooError(f"{name}: no feature columns left to learn from")
    return pd.DataFrame(out)


def finite_feature(s, col: str, name: str):
    """A numeric column as float32 (NaN stays: missing); an infinite value, or one past float32's range, is an
    error naming the row (the models cannot take it)."""
    import pandas as pd

    with np.errstate(over="ignore", invalid="ignore"):
        v = s.to_numpy(np.float64, na_value=np.nan).astype(np.float32)
    bad = np.where(np.isinf(v))[0]
    if len(bad):
        raise ZooError(f"{name} row {bad[0] + 2}: column {col!r} is {s.iloc[bad[0]]}, not a finite (float32) number "
                       f"({len(bad)} rows in all); fix them, or drop={col}")
    return pd.Series(v, index=s.index, name=s.name)


def is_id_like(s, numeric: bool) -> bool:
    values = s.dropna()
    if len(values) < 20 or values.nunique() != len(values):
        return False
    if not numeric:
        return True
    v = values.to_numpy()
    return bool(np.all(v == np.round(v)) and np.all(np.diff(v) > 0))  # distinct integers, increasing


def encode_target(y_raw, task: str, name: str) -> tuple[np.ndarray, str, list[str] | None]:
    import pandas as pd

    numeric = pd.api.types.is_numeric_dtype(y_raw)
    distinct = y_raw.nunique()
    if task == "auto":
        if not numeric or distinct == 2:
            task = "binary" if distinct == 2 else "multiclass"
        elif np.all(y_raw.to_numpy() == np.round(y_raw.to_numpy())) and distinct <= 20:
            task = "multiclass"  # a handful of integer codes: classes
        else:
            task = "regression"
    if task == "regression":
        if not numeric:
            raise ZooError(f"{name}: task=regression needs a numeric target, got values like {y_raw.iloc[0]!r}")
        return y_raw.to_numpy(np.float64), task, None
    classes = sorted(y_raw.astype(str).unique())
    if len(classes) < 2:
        raise ZooError(f"{name}: the target has one class only ({classes[0]!r})")
    if task == "binary" and len(classes) != 2:
        raise ZooError(f"{name}: task=binary but the target has {len(classes)} classes")
    index = {c: i for i, c in enumerate(classes)}
    return y_raw.astype(str).map(index).to_numpy(np.int64), task, classes


# =============================================================================================
# Metrics, sample weights, the target transform
# =============================================================================================

# What each task reports (``recipe_zoo.core.metrics.score``): pred is values for regression, P(class 1) for
# binary, (n, classes) probabilities for multiclass; ROC-AUC is left out when the rows hold one class.
METRIC_NAMES = {"regression": ("rmse", "mae", "r2"), "binary": ("accuracy", "macro_f1", "roc_auc"),
                "multiclass": ("accuracy", "macro_f1", "roc_auc")}


def scores(table: Table, rows: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """The task's metrics on these rows. Multiclass ROC-AUC (one-vs-rest) is left out when a class is absent from
    the rows: the validation carve is by row content, not stratified, so a small class can miss it."""
    names = METRIC_NAMES[table.task]
    if table.task == "multiclass" and len(np.unique(table.y[rows])) < len(table.classes):
        names = tuple(n for n in names if n != "roc_auc")
    return score(table.y[rows], pred, table.task, names)


def primary_metric(task: str) -> tuple[str, bool]:
    return ("rmse", False) if task == "regression" else ("accuracy", True)


def better(a: float, b: float, higher: bool) -> bool:
    return a > b if higher else a < b


def sample_weights(table: Table, idx: np.ndarray, cfg: TabularConfig) -> np.ndarray | None:
    if cfg.class_weight == "none" or table.task == "regression":
        return None
    counts = np.bincount(table.y[idx], minlength=len(table.classes)).astype(np.float64)
    w = len(idx) / (len(counts) * np.maximum(counts, 1))
    return w[table.y[idx]]


def use_log(table: Table, idx: np.ndarray, cfg: TabularConfig) -> list[bool]:
    """Target transforms to try: log1p only for a positive, right-skewed regression target (or when asked)."""
    if table.task != "regression" or cfg.log_target == "off":
        return [False]
    if cfg.log_target == "on":
        if (table.y[idx] <= -1).any():
            raise ZooError(f"{table.name}: log_target=on needs targets above -1")
        return [True]
    from scipy.stats import skew

    y = table.y[idx]
    return [False, True] if (y > 0).all() and skew(y) > 0.5 else [False]
