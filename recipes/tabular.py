"""Tables: gradient-boosted trees done right (``tabular/xgb``) and a neural network for large tables
(``tabular/mlp``: an MLP or a small FT-Transformer through the core loop).

Reads top to bottom: config, reading the table (pandas) and its bad inputs, the split, features
(categoricals, engineered ratios and rotated coordinates), metrics, XGBoost (settings chosen on a
validation carve-out, then bagged over folds of the training rows), the neural network, the recipes.
The test rows are never used for any choice.
"""
from __future__ import annotations

import functools
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
from recipe_zoo.core.budget import xgboost_time_limit
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
class TabularConfig(LoopSettings):
    data: str = "california-housing"  # dataset name (zoo data list), or a .csv / .parquet file
    target: str = ""  # the column to predict ('' = the dataset's)
    drop: str = ""  # columns to leave out, comma-separated
    categorical: str = ""  # columns to treat as categories besides the text ones, comma-separated
    task: Literal["auto", "regression", "binary", "multiclass"] = "auto"  # auto: from the target's values
    target_nan: Literal["error", "drop"] = "error"  # rows whose target is missing: stop, or drop them (counted)
    log_target: Literal["auto", "on", "off"] = "auto"  # regression on log1p(target); auto: xgb tries both on
    # validation when the target is positive and skewed, mlp uses it then
    test_size: float = 0.2  # held-out fraction when the data has no test file
    split_seed: int = 42  # the test split's seed: fixed, so runs with different --seed share the test rows
    val_fraction: float = 0.1  # validation carve-out of the training rows (early stopping, choices)
    folds: int = 0  # k-fold cross-validation over all rows: mean ± std of the test metrics (0 = one split)
    features: Literal["auto", "none"] = "auto"  # auto: ratios of count-like columns, rotated lat/lon
    class_weight: Literal["none", "balanced"] = "none"  # balanced: weight rows by inverse class frequency
    # xgb
    max_depth: int = 0  # tree depth; 0 = chosen on validation from 6, 8, 10
    xgb_lr: float = 0.03  # learning rate of the final (bagged) models
    n_estimators: int = 20000  # rounds at most; early stopping decides
    early_stopping: int = 200  # rounds without validation improvement before stopping
    subsample: float = 0.8  # rows per tree
    colsample: float = 0.8  # columns per tree
    bagging: int = 5  # final models, each early-stopped on its own fold of the training rows; averaged
    # mlp
    model: Literal["mlp", "ft-transformer"] = "mlp"  # an MLP over embeddings, or a small FT-Transformer
    hidden: int = 256  # MLP width (ft-transformer: token width / 4)
    layers: int = 3  # MLP hidden layers (ft-transformer: blocks)
    dropout: float = 0.1  # dropout in the MLP / transformer
    quantile: bool = False  # numeric features through a normal quantile transform instead of z-scores
    lr: float = 1e-3  # peak AdamW LR (warmup, then cosine to zero)
    weight_decay: float = 1e-5  # AdamW weight decay on weights (never biases, norms, embeddings)
    batch_size: int = 256  # rows per step
    warmup: float = 0.05  # LR warmup fraction
    eval_every: float = 0.05  # validation this often; the best validation state is kept (early stopping)

    def benchmark_key(self, data_key: str) -> str:
        return data_key + (f":{self.folds}fold" if self.folds else "")


# =============================================================================================
# Reading the table
# =============================================================================================

ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                 "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
                 "income"]
SKLEARN_SETS = {"diabetes": "load_diabetes", "breast-cancer": "load_breast_cancer", "wine": "load_wine"}


@dataclass
class Table:
    name: str
    X: object  # pandas DataFrame of features (categoricals as pandas 'category')
    y: np.ndarray  # float targets, or class indices
    task: str  # regression | binary | multiclass
    classes: list[str] | None
    test_rows: np.ndarray | None  # rows of a given test file (adult); None = split by split_seed
    notes: list[str]


def columns_list(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def read_frame(cfg: TabularConfig, run):
    """(frame, target column, rows of a given test file or None, name)."""
    import pandas as pd

    if cfg.data == "california-housing":
        return pd.read_csv(run.data_path(cfg.data)), "median_house_value", None, cfg.data
    if cfg.data == "adult":
        folder = run.data_path(cfg.data)
        parts = [pd.read_csv(folder / f, header=None, names=ADULT_COLUMNS, sep=r",\s*", engine="python",
                             na_values="?", skip_blank_lines=True, comment="|") for f in ("adult.data", "adult.test")]
        parts[1]["income"] = parts[1]["income"].str.rstrip(".")  # the test file's labels end with a period
        frame = pd.concat(parts, ignore_index=True)
        return frame, "income", np.arange(len(parts[0]), len(frame)), cfg.data
    if cfg.data in SKLEARN_SETS:
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, SKLEARN_SETS[cfg.data])(as_frame=True)
        return bunch.frame, "target", None, cfg.data
    path = Path(cfg.data).expanduser()
    if not path.is_file():
        raise ZooError(f"{cfg.data}: no such file, and not a dataset name (see `zoo data list`)")
    try:
        if path.suffix.lower() == ".parquet":
            frame = pd.read_parquet(path)
        elif path.suffix.lower() in (".csv", ".tsv"):
            frame = pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",")
        else:
            raise ZooError(f"{path}: expected a .csv, .tsv or .parquet file")
    except pd.errors.EmptyDataError:
        raise ZooError(f"{path}: empty file (no header row, no rows)") from None
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ZooError(f"{path}: cannot read the table ({first[:200]})") from None
    if frame.empty:
        raise ZooError(f"{path}: no rows")
    if not cfg.target:
        raise ZooError(f"{path}: say which column to predict: target=COLUMN (columns: {column_list(frame)})")
    return frame, cfg.target, None, str(path)


def load_table(cfg: TabularConfig, run) -> Table:
    frame, target, test_rows, name = read_frame(cfg, run)
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
    if missing.any():
        first = int(np.where(missing)[0][0])
        if cfg.target_nan == "error":
            raise ZooError(f"{name}: {int(missing.sum())} rows have no {target!r} (first: row {first + 2}); "
                           "fill them in or set target_nan=drop")
        keep = np.where(~missing)[0]
        if test_rows is not None:
            test_rows = np.searchsorted(keep, np.intersect1d(keep, test_rows))
        frame = frame.iloc[keep].reset_index(drop=True)
        notes.append(f"{int(missing.sum())} rows without a target dropped")
        run.report("target_nan_dropped", int(missing.sum()))
    y_raw = frame.pop(target)
    frame = frame.drop(columns=columns_list(cfg.drop))
    X = prepare_columns(frame, set(columns_list(cfg.categorical)), name, notes)
    y, task, classes = encode_target(y_raw, cfg.task, name)
    return Table(name, X, y, task, classes, test_rows, notes)


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
# Splits
# =============================================================================================

def stratify(table: Table, idx: np.ndarray):
    return table.y[idx] if table.task != "regression" else None


def test_split(table: Table, cfg: TabularConfig) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows): the given test file, or a split_seed split (stratified for classes)."""
    from sklearn.model_selection import train_test_split

    n = len(table.y)
    if table.test_rows is not None:
        return np.setdiff1d(np.arange(n), table.test_rows), np.asarray(table.test_rows)
    if not 0 < cfg.test_size < 1:
        raise ZooError(f"test_size={cfg.test_size}: a fraction between 0 and 1")
    return tuple(train_test_split(np.arange(n), test_size=cfg.test_size, random_state=cfg.split_seed,
                                  stratify=stratify(table, np.arange(n))))


def fold_splits(table: Table, cfg: TabularConfig):
    from sklearn.model_selection import KFold, StratifiedKFold

    if cfg.folds < 2:
        raise ZooError(f"folds={cfg.folds}: cross-validation needs at least 2 folds")
    n = len(table.y)
    kind = KFold if table.task == "regression" else StratifiedKFold
    return list(kind(cfg.folds, shuffle=True, random_state=cfg.split_seed).split(np.zeros(n), stratify(table, np.arange(n))))


def carve_validation(table: Table, train: np.ndarray, fraction: float, seed: int):
    from sklearn.model_selection import train_test_split

    if not 0 < fraction < 1:
        raise ZooError(f"val_fraction={fraction}: a fraction between 0 and 1")
    return tuple(train_test_split(train, test_size=fraction, random_state=seed, stratify=stratify(table, train)))


# =============================================================================================
# Features
# =============================================================================================

COORDINATES = (("latitude", "longitude"), ("lat", "lon"), ("lat", "lng"))


def engineered(X, notes: list[str] | None = None):
    """Ratios between count-like columns (non-negative whole numbers with a long right tail: rooms, people,
    households) and coordinates rotated by 15-75 degrees (trees split on one axis at a time)."""
    X = X.copy()
    numeric = [c for c in X.columns if str(X[c].dtype) != "category"]
    counts = []
    for c in numeric:
        v = X[c].to_numpy(np.float64)
        v = v[np.isfinite(v)]
        if len(v) and v.min() >= 0 and np.all(v == np.round(v)) and np.median(v) > 0 \
                and np.percentile(v, 99) / np.median(v) >= 3:
            counts.append(c)
    counts = counts[:6]
    added = []
    for i, a in enumerate(counts):
        for b in counts[i + 1:]:
            X[f"{a}/{b}"] = (X[a] / X[b].where(X[b] != 0)).astype(np.float32)
            added.append(f"{a}/{b}")
    lower = {c.lower(): c for c in numeric}
    for lat, lon in COORDINATES:
        if lat in lower and lon in lower:
            for deg in (15, 30, 45, 60, 75):
                t = math.radians(deg)
                X[f"rot{deg}"] = (math.cos(t) * X[lower[lat]] + math.sin(t) * X[lower[lon]]).astype(np.float32)
            added.append("rotated coordinates")
            break
    if notes is not None and added:
        notes.append(f"features added: {', '.join(added)}")
    return X


def impute_unseen_missing(X, train: np.ndarray, log=None):
    """Fill numeric columns that are missing only outside the training rows. Trees learn no direction for
    a missing value they never saw (XGBoost sends it down an arbitrary branch) and the network gets no
    flag for it; each such value is predicted from the row's complete columns by a ridge regression
    fitted on the training rows (on log1p scale when the columns are non-negative, as counts are)."""
    from sklearn.linear_model import Ridge

    numeric = [c for c in X.columns if str(X[c].dtype) != "category"]
    complete = [c for c in numeric if not X[c].iloc[train].isna().any()]
    out = None
    for c in complete:
        missing = X[c].isna().to_numpy()
        if not missing.any():
            continue
        others = [o for o in complete if o != c]
        values = X[others + [c]].to_numpy(np.float64)
        positive = bool(np.nanmin(values) >= 0)
        values = np.log1p(values) if positive else values
        usable = missing & ~np.isnan(values[:, :-1]).any(axis=1)
        out = X.copy() if out is None else out
        filled = np.full(missing.sum(), np.nanmedian(values[train, -1]))
        if others and usable.any():
            model = Ridge(alpha=1.0).fit(values[train, :-1], values[train, -1])
            filled[usable[missing]] = model.predict(values[usable, :-1])
        out.loc[missing, c] = (np.expm1(filled) if positive else filled).astype(np.float32)
        if log:
            log(f"column {c!r}: {int(missing.sum())} values missing outside the training rows and none inside: "
                f"filled by a ridge regression on {len(others)} complete columns")
    return X if out is None else out


def features_for(cfg: TabularConfig, table: Table, train: np.ndarray, run):
    """The model's view of the table for one split: unseen-missing values filled, engineered columns added."""
    X = impute_unseen_missing(table.X, train, run.log)
    return engineered(X, table.notes) if cfg.features == "auto" else X


# =============================================================================================
# Metrics (scikit-learn)
# =============================================================================================

def score(y: np.ndarray, pred: np.ndarray, task: str) -> dict[str, float]:
    """pred: values for regression, P(class 1) for binary, (n, classes) probabilities for multiclass."""
    from sklearn import metrics as skm

    if task == "regression":
        return {"rmse": float(np.sqrt(skm.mean_squared_error(y, pred))), "mae": float(skm.mean_absolute_error(y, pred)),
                "r2": float(skm.r2_score(y, pred))}
    labels = (pred > 0.5).astype(int) if task == "binary" else pred.argmax(axis=1)
    out = {"accuracy": float(skm.accuracy_score(y, labels)), "macro_f1": float(skm.f1_score(y, labels, average="macro"))}
    if len(np.unique(y)) > 1:
        out["roc_auc"] = float(skm.roc_auc_score(y, pred, multi_class="ovr") if task == "multiclass"
                               else skm.roc_auc_score(y, pred))
    return out


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


# =============================================================================================
# XGBoost: depth (and target transform) chosen on a validation carve-out, then bagged over folds
# =============================================================================================

def xgb_model(table: Table, cfg: TabularConfig, depth: int, lr: float, seed: int, seconds: float | None,
              rounds: int):
    import xgboost as xgb

    params = dict(n_estimators=rounds, learning_rate=lr, max_depth=depth, min_child_weight=1 + depth // 3,
                  subsample=cfg.subsample, colsample_bytree=cfg.colsample, tree_method="hist",
                  enable_categorical=True, max_cat_to_onehot=8, early_stopping_rounds=cfg.early_stopping,
                  random_state=seed, n_jobs=os.cpu_count(),
                  callbacks=[xgboost_time_limit(seconds)] if seconds else None)
    if table.task == "regression":
        return xgb.XGBRegressor(**params)
    return xgb.XGBClassifier(**params, eval_metric="logloss" if table.task == "binary" else "mlogloss")


def xgb_predict(model, X, task: str, log: bool) -> np.ndarray:
    if task == "regression":
        p = model.predict(X)
        return np.expm1(p) if log else p
    proba = model.predict_proba(X)
    return proba[:, 1] if task == "binary" else proba


def fit_xgb(cfg: TabularConfig, run, table: Table, X, train: np.ndarray, test: np.ndarray, seconds: float | None,
            rounds: int, label: str = "") -> tuple[np.ndarray, dict]:
    """Choose depth and target transform on a validation carve-out (learning rate 0.1, quick), then train
    ``bagging`` models at ``xgb_lr`` on folds of the training rows and average their test predictions."""
    from sklearn.model_selection import KFold, StratifiedKFold

    metric, higher = primary_metric(table.task)
    fit_rows, val = carve_validation(table, train, cfg.val_fraction, run.seed)
    depths = [cfg.max_depth] if cfg.max_depth else [6, 8, 10]
    logs = use_log(table, train, cfg)
    grid = [(d, lg) for lg in logs for d in depths]
    start = time.perf_counter()
    share = (seconds * 0.3 / len(grid)) if seconds else None  # 30% of the time for choices, 70% for the final models
    best = None
    for depth, log in grid:
        y_fit = np.log1p(table.y[fit_rows]) if log else table.y[fit_rows]
        y_val = np.log1p(table.y[val]) if log else table.y[val]
        m = xgb_model(table, cfg, depth, 0.1, run.seed, share, rounds)
        m.fit(X.iloc[fit_rows], y_fit, sample_weight=sample_weights(table, fit_rows, cfg),
              eval_set=[(X.iloc[val], y_val)], verbose=False)
        value = score(table.y[val], xgb_predict(m, X.iloc[val], table.task, log), table.task)[metric]
        run.log(f"{label}choice: depth {depth}{', log target' if log else ''}: validation {metric} {value:.4f} "
                f"({m.best_iteration + 1} rounds)")
        if best is None or better(value, best[0], higher):
            best = (value, depth, log)
    _, depth, log = best
    k = max(1, cfg.bagging)
    remaining = (seconds - (time.perf_counter() - start)) / k if seconds else None
    if k == 1:
        folds = [(fit_rows, val)]
    else:
        kind = KFold if table.task == "regression" else StratifiedKFold
        folds = [(train[a], train[b]) for a, b in kind(k, shuffle=True, random_state=run.seed).split(
            np.zeros(len(train)), table.y[train] if table.task != "regression" else None)]
    preds, oof, models, iters = [], np.zeros(len(table.y)) if table.task != "multiclass" else None, [], []
    for i, (tr, va) in enumerate(folds):
        y_tr = np.log1p(table.y[tr]) if log else table.y[tr]
        y_va = np.log1p(table.y[va]) if log else table.y[va]
        m = xgb_model(table, cfg, depth, cfg.xgb_lr, run.seed + i, remaining, rounds)
        m.fit(X.iloc[tr], y_tr, sample_weight=sample_weights(table, tr, cfg), eval_set=[(X.iloc[va], y_va)],
              verbose=False)
        preds.append(xgb_predict(m, X.iloc[test], table.task, log))
        if oof is not None:
            oof[va] = xgb_predict(m, X.iloc[va], table.task, log)
        models.append(m)
        iters.append(m.best_iteration + 1)
    stats = {"depth": depth, "log_target": log, "rounds": float(np.mean(iters)), "models": models,
             "train_seconds": time.perf_counter() - start}
    if oof is not None and k > 1:
        stats[f"oof_{metric}"] = score(table.y[train], oof[train], table.task)[metric]
    run.log(f"{label}final: depth {depth}{', log target' if log else ''}, lr {cfg.xgb_lr}, {k} model(s) of "
            f"{', '.join(map(str, iters))} rounds" + (f"; out-of-fold {metric} {stats[f'oof_{metric}']:.4f}"
                                                       if f"oof_{metric}" in stats else ""))
    return np.mean(preds, axis=0), stats


def save_importances(models: list, run) -> None:
    """Mean gain per feature over the bagged models: importances.csv and importances.png in the run."""
    total: dict[str, float] = {}
    for m in models:
        for k, v in m.get_booster().get_score(importance_type="gain").items():
            total[k] = total.get(k, 0.0) + v / len(models)
    rows = sorted(total.items(), key=lambda kv: -kv[1])
    with open(run.dir / "importances.csv", "w") as f:
        f.write("feature,gain\n" + "".join(f"\"{k}\",{v:.6g}\n" for k, v in rows))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        top = rows[:20][::-1]
        fig, ax = plt.subplots(figsize=(7, 0.3 * len(top) + 1.2), constrained_layout=True)
        ax.barh([k for k, _ in top], [v for _, v in top])
        ax.set_xlabel("mean gain")
        ax.set_title("XGBoost feature importance")
        fig.savefig(run.dir / "importances.png", dpi=100)
        plt.close(fig)
    except Exception as exc:  # a plot must never fail a finished run
        run.log(f"importance plot skipped: {exc}")
    if rows:
        run.report("top_features", ", ".join(k for k, _ in rows[:3]))


# =============================================================================================
# The neural network: numeric standardisation (or quantiles), categorical embeddings, MLP / FT-Transformer
# =============================================================================================

@dataclass
class Encoded:
    num: torch.Tensor  # (n, numeric features + missing indicators) float
    cat: torch.Tensor  # (n, categorical columns) long; 0 = missing or unseen
    cardinalities: list[int]


def encode_for_nn(X, fit_rows: np.ndarray, quantile: bool, seed: int) -> Encoded:
    """Numbers: NaN -> training median plus a missing flag, then z-score (or a normal quantile transform)
    fitted on the training rows. Categories: index + 1 over the training rows' categories, 0 for the rest."""
    numeric = [c for c in X.columns if str(X[c].dtype) != "category"]
    categorical = [c for c in X.columns if str(X[c].dtype) == "category"]
    cols = []
    if numeric:
        values = X[numeric].to_numpy(np.float64)
        missing = np.isnan(values)
        median = np.nan_to_num(np.nanmedian(values[fit_rows], axis=0))
        values = np.where(missing, median, values)
        if quantile:
            from sklearn.preprocessing import QuantileTransformer

            qt = QuantileTransformer(n_quantiles=min(1000, len(fit_rows)), output_distribution="normal",
                                     subsample=10**9, random_state=seed).fit(values[fit_rows])
            values = qt.transform(values)
        else:
            mean, std = values[fit_rows].mean(axis=0), values[fit_rows].std(axis=0)
            values = (values - mean) / np.where(std > 1e-12, std, 1.0)
        cols.append(np.clip(values, -10, 10))
        flags = missing[:, missing[fit_rows].any(axis=0)]
        if flags.size:
            cols.append(flags.astype(np.float64))
    num = torch.from_numpy(np.concatenate(cols, axis=1) if cols else np.zeros((len(X), 0))).float()
    cat_cols, cards = [], []
    for c in categorical:
        codes = X[c].cat.codes.to_numpy().astype(np.int64)  # -1 = missing
        seen = np.unique(codes[fit_rows][codes[fit_rows] >= 0])
        lookup = np.zeros(len(X[c].cat.categories) + 1, dtype=np.int64)
        lookup[seen] = np.arange(1, len(seen) + 1)
        cat_cols.append(np.where(codes >= 0, lookup[codes], 0))
        cards.append(len(seen) + 1)
    cat = torch.from_numpy(np.stack(cat_cols, axis=1) if cat_cols else np.zeros((len(X), 0), dtype=np.int64))
    return Encoded(num, cat, cards)


def embedding_dim(cardinality: int) -> int:
    return int(min(32, round(1.6 * cardinality ** 0.56)))  # fastai's rule of thumb


class TabularMLP(nn.Module):
    def __init__(self, n_num: int, cards: list[int], out: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, embedding_dim(c)) for c in cards)
        width = n_num + sum(embedding_dim(c) for c in cards)
        blocks = []
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(width, out)

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        parts = [num] + [emb(cat[:, i]) for i, emb in enumerate(self.embeddings)]
        return self.head(self.body(torch.cat(parts, dim=1)))


class FTTransformer(nn.Module):
    """Gorishniy et al. 2021: each feature a token (numbers: x * w_j + b_j; categories: an embedding),
    a CLS token, pre-norm transformer blocks, the CLS state to the output."""

    def __init__(self, n_num: int, cards: list[int], out: int, d: int, blocks: int, dropout: float):
        super().__init__()
        self.num_weight = nn.Parameter(torch.randn(n_num, d) / math.sqrt(d))
        self.num_bias = nn.Parameter(torch.zeros(n_num, d))
        self.embeddings = nn.ModuleList(nn.Embedding(c, d) for c in cards)
        self.cls = nn.Parameter(torch.randn(1, 1, d) / math.sqrt(d))
        layer = nn.TransformerEncoderLayer(d, nhead=8 if d % 8 == 0 else 1, dim_feedforward=int(d * 4 / 3) * 2,
                                           dropout=dropout, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, blocks, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, out)

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        tokens = [num.unsqueeze(-1) * self.num_weight + self.num_bias]
        tokens += [emb(cat[:, i]).unsqueeze(1) for i, emb in enumerate(self.embeddings)]
        x = torch.cat([self.cls.expand(len(num), -1, -1)] + tokens, dim=1)
        return self.head(self.norm(self.encoder(x)[:, 0]))


@torch.no_grad()
def nn_predict(model: nn.Module, enc: Encoded, rows: np.ndarray, device, batch: int = 4096) -> np.ndarray:
    model.eval()
    idx = torch.as_tensor(rows)
    out = [model(enc.num[idx[i:i + batch]].to(device), enc.cat[idx[i:i + batch]].to(device)).float().cpu()
           for i in range(0, len(idx), batch)]
    model.train()
    return torch.cat(out).numpy()


def fit_nn(cfg: TabularConfig, run, table: Table, X, train: np.ndarray, test: np.ndarray, budget,
           label: str = "") -> tuple[np.ndarray, dict]:
    fit_rows, val = carve_validation(table, train, cfg.val_fraction, run.seed)
    device = choose_device(run.device)
    enc = encode_for_nn(X, fit_rows, cfg.quantile, run.seed)
    log = use_log(table, train, cfg)[-1]  # the network takes the log when the target is positive and skewed
    metric, higher = primary_metric(table.task)
    if table.task == "regression":
        t = np.log1p(table.y) if log else table.y
        mean, std = float(t[fit_rows].mean()), float(t[fit_rows].std()) or 1.0
        target = torch.from_numpy((t - mean) / std).float()
        out = 1
    else:
        target = torch.from_numpy(table.y)
        out = 1 if table.task == "binary" else len(table.classes)

    def to_pred(raw: np.ndarray) -> np.ndarray:
        if table.task == "regression":
            v = raw[:, 0] * std + mean
            return np.expm1(v) if log else v
        if table.task == "binary":
            return 1 / (1 + np.exp(-raw[:, 0]))
        e = np.exp(raw - raw.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    torch.manual_seed(run.seed)
    if cfg.model == "mlp":
        model = TabularMLP(enc.num.size(1), enc.cardinalities, out, cfg.hidden, cfg.layers, cfg.dropout)
    else:
        model = FTTransformer(enc.num.size(1), enc.cardinalities, out, max(8, cfg.hidden // 4), cfg.layers,
                              cfg.dropout)
    model = model.to(device)
    weights = sample_weights(table, np.arange(len(table.y)), cfg)
    w = torch.from_numpy(weights).float() if weights is not None else torch.ones(len(table.y))
    rows = torch.as_tensor(fit_rows)
    batches = TensorBatches((enc.num[rows], enc.cat[rows], target[rows], w[rows]), cfg.batch_size, seed=run.seed)
    best = BestState(higher)

    def evaluate(m: nn.Module) -> dict[str, float]:
        values = score(table.y[val], to_pred(nn_predict(m, enc, val, device)), table.task)
        best.update(values[metric], m)
        return {f"val_{k}": v for k, v in values.items()}

    def loss_fn(m: nn.Module, b) -> torch.Tensor:
        num, cat, y, weight = (t.to(device, non_blocking=True) for t in b)
        raw = m(num, cat)
        if table.task == "regression":
            loss = F.mse_loss(raw[:, 0], y, reduction="none")
        elif table.task == "binary":
            loss = F.binary_cross_entropy_with_logits(raw[:, 0], y.float(), reduction="none")
        else:
            loss = F.cross_entropy(raw, y, reduction="none")
        return (loss * weight).sum() / weight.sum()

    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), lr=cfg.lr)
    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=0.0)
    result = fit(model, optimizer, batches, loss_fn, run.part(budget, main=not label), device=device,
                 evaluate=evaluate, update_hparams=functools.partial(schedule.apply_schedules, lr=lr),
                 settings=LoopSettings.of(cfg), keep={"best": best})
    best.restore(model)
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    stats["log_target"] = log
    return to_pred(nn_predict(model, enc, test, device)), stats


# =============================================================================================
# The recipes
# =============================================================================================

def splits_for(cfg: TabularConfig, table: Table) -> list[tuple[np.ndarray, np.ndarray]]:
    if cfg.folds:
        if table.test_rows is not None:
            raise ZooError(f"folds={cfg.folds}: {table.name} has its own test file; cross-validation would mix it in")
        return fold_splits(table, cfg)
    return [test_split(table, cfg)]


def over_splits(run, table: Table, views: list, fit_one) -> tuple[dict, dict, float]:
    """``fit_one(k, X, train, test) -> (test predictions, stats)`` on each split: the test metrics
    (mean ± std over folds), the last split's stats, and the training seconds in all."""
    results, stats, total = [], {}, 0.0
    for k, (X, train, test) in enumerate(views):
        pred, stats = fit_one(k, X, train, test)
        total += stats["train_seconds"]
        results.append({f"test_{m}": v for m, v in score(table.y[test], pred, table.task).items()})
    return summarize_folds(results, run.log), stats, total


def prepare(cfg: TabularConfig, run) -> tuple[Table, list]:
    """The table, its splits and each split's features (engineering adds columns the log reports)."""
    table = load_table(cfg, run)
    metric, higher = primary_metric(table.task)
    run.set_metric(f"test_{metric}", higher)
    splits = splits_for(cfg, table)
    views = [(features_for(cfg, table, train, run), train, test) for train, test in splits]
    for note in dict.fromkeys(table.notes):
        run.log(f"{table.name}: {note}")
    X = views[0][0]
    n_cat = sum(str(X[c].dtype) == "category" for c in X.columns)
    run.log(f"{table.name}: {len(table.y)} rows, {X.shape[1]} features ({n_cat} categorical), {table.task}"
            f"{'' if table.classes is None else ' (' + ', '.join(table.classes[:5]) + ')'}")
    run.report("rows_features", f"{len(table.y)} x {X.shape[1]}")
    return table, views


def inspect_split(run, table: Table, views: list, loop: bool) -> None:
    """The first split's training and test rows for ``zoo doctor`` (test rows copied in train inflate the score
    most). Missing numbers shown as the network takes them, the median plus a missing flag (XGBoost takes NaN
    natively): the rows stay equal exactly when the table's rows are."""
    if not run.inspecting:
        return
    X, train, test = views[0]
    num = X.select_dtypes("number")
    shown = X.fillna(num.median()).join(num.isna().loc[:, num.isna().any()].add_suffix(" missing"))
    run.inspect(train=(shown.iloc[train], table.y[train]), val=(shown.iloc[test], table.y[test]),
                task="regression" if table.task == "regression" else "classification",
                num_classes=None if table.classes is None else len(table.classes), loop=loop)


@recipe("tabular/xgb", config=TabularConfig, benchmark="california-housing", metric="test_rmse",
        higher_is_better=False, budget="1m",
        summary="XGBoost hist with native categoricals, depth and log target chosen on validation, bagged over "
                "folds with early stopping; importances saved",
        scale_out="single process: XGBoost uses its own threads (nthread = all cores); for several machines "
                  "use xgboost.dask, xgboost.spark or Ray's xgboost_ray with the same parameters")
def train_xgb(cfg: TabularConfig, run) -> dict[str, float]:
    table, views = prepare(cfg, run)
    inspect_split(run, table, views, loop=False)
    if run.budget.kind == "epochs":
        raise ZooError("tabular/xgb takes a time budget (--budget 1m) or a cap on boosting rounds (--budget 500steps)")
    seconds = run.budget.amount / len(views) if run.budget.kind == "seconds" else None
    rounds = int(run.budget.amount) if run.budget.kind == "steps" else cfg.n_estimators
    metrics, stats, total = over_splits(run, table, views, lambda k, X, train, test: fit_xgb(
        cfg, run, table, X, train, test, seconds, rounds, f"fold {k}: " if cfg.folds else ""))
    save_importances(stats["models"], run)
    run.report("trees", f"depth {stats['depth']}{', log target' if stats['log_target'] else ''}, "
                        f"{max(1, cfg.bagging)} x {stats['rounds']:.0f} rounds (mean), xgboost's own threads "
                        f"({os.cpu_count()})")
    return {**metrics, "train_seconds": total, "rows": len(table.y), "peak_mem_mb": peak_memory_mb(torch.device("cpu"))}


@recipe("tabular/mlp", config=TabularConfig, benchmark="california-housing", metric="test_rmse",
        higher_is_better=False, budget="1m",
        summary="an MLP (or model=ft-transformer) over standardised numbers and categorical embeddings through "
                "the core loop; for large tables")
def train_mlp(cfg: TabularConfig, run) -> dict[str, float]:
    from recipe_zoo.core.budget import Budget

    table, views = prepare(cfg, run)
    inspect_split(run, table, views, loop=True)
    budget = Budget(run.budget.kind, run.budget.amount / len(views)) if run.budget.kind == "seconds" else run.budget
    metrics, stats, total = over_splits(run, table, views, lambda k, X, train, test: fit_nn(
        cfg, run, table, X, train, test, budget, f"fold {k}" if k else ""))
    metric = primary_metric(table.task)[0]
    run.report("network", f"{cfg.model}, {'quantile' if cfg.quantile else 'z-score'} numbers"
                          f"{', log target' if stats['log_target'] else ''}; best validation {metric} "
                          f"{stats[f'best_val_{metric}']:.4f}")
    return {**metrics, "train_seconds": total, "params_M": stats["params_M"],
            "peak_mem_mb": stats["peak_mem_mb"], "mfu_percent": stats.get("mfu_percent"), "rows": len(table.y)}
