"""A trained tabular run as a model: what both recipes save after scoring (``preprocess.json``: the feature columns
and their types, each split's imputation and engineered-feature plans and the model's own state; the run's
``predictions.csv``; ``model.json``), and the predict driver both hooks share.

New rows go through what training did to the table's rows: the same column types (a category as the training
table's categories, one never seen there as missing), the split's imputation plan, engineered features, then the
model. Without ``data=`` the run's own table and splits are rebuilt from its config and scored by
``protocol.score_splits``, the function training scored them with: the run's metrics again.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core import artifact
from recipe_zoo.core.artifact import PredictOptions, Predictions
from recipe_zoo.core.datafiles import column_list
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.tabular import data, features
from recipe_zoo.recipes.tabular.data import Table
from recipe_zoo.recipes.tabular.protocol import score_splits
from recipe_zoo.recipes.tabular.split import splits_for

PREPROCESS = "preprocess.json"


@dataclass
class TabularPredictOptions(PredictOptions):
    probabilities: bool = True  # classification: also a prob_<class> column per class


# =============================================================================================
# Saving, at the end of training
# =============================================================================================

def schema(cfg, table: Table) -> list[dict]:
    """The feature columns as the model reads them, in order: numbers, or categories with the training table's
    categories (``strip``: text columns were read stripped; ``categorical=`` and true/false columns as they are)."""
    named = set(data.columns_list(cfg.categorical))
    out = []
    for name in table.X.columns:
        s = table.X[name]
        if str(s.dtype) == "category":
            out.append({"name": name, "kind": "category", "categories": [str(c) for c in s.cat.categories],
                        "strip": name not in named})
        else:
            out.append({"name": name, "kind": "number"})
    return out


def save(run, cfg, table: Table, views: list, test_preds: list, splits: list[dict], *, recipe: str,
         weights: list[str], selected: str, log_target: list[bool], **more) -> None:
    """``preprocess.json`` (the columns; per split its feature plan and ``splits[k]``, the model's own state),
    ``predictions.csv`` (each split's test rows) and ``model.json`` (``recipe``: the name when the run has no
    spec, as a ``SimpleRun``; ``more``: further card entries, as ``training``, the engine that fitted). Only the
    main process writes."""
    from recipe_zoo.core.distributed import is_main

    state = {"target": table.target, "task": table.task, "classes": table.classes, "rows": len(table.y),
             "columns": schema(cfg, table),
             "splits": [{"features": view[4], **split} for view, split in zip(views, splits)]}
    if is_main():
        (run.dir / PREPROCESS).write_text(json.dumps(state, indent=1, allow_nan=False) + "\n")
    rows = []
    for k, ((_, _, _, test, _), pred) in enumerate(zip(views, test_preds)):
        rows += split_rows(state, table, test, pred, k if len(views) > 1 else None)
    artifact.write_predictions(run.dir, rows)
    several = f"{len(views)} fold models (each scores its fold's test rows; new data: their mean)"
    artifact.write_card(run.dir, recipe=artifact.recipe_name(run, recipe),
                        task="regression" if table.task == "regression" else "classification", weights=weights,
                        selected=several if len(views) > 1 else selected, classes=table.classes, files=[PREPROCESS],
                        preprocess={"file": PREPROCESS, "target": table.target, "table_task": table.task,
                                    "features": list(views[0][0].columns), "log_target": log_target},
                        evaluation={"splits": len(views), "folds": cfg.folds}, **more)


# =============================================================================================
# Rows out: the prediction columns
# =============================================================================================

def prediction_columns(state: dict, pred: np.ndarray, probabilities: bool = True) -> list[dict]:
    """Per row: ``predicted_<target>`` (a value, or the class as the metrics label it: P > 0.5, or the most
    probable) and, for classes, ``prob_<class>``."""
    key = f"predicted_{state['target']}"
    if state["task"] == "regression":
        return [{key: float(v)} for v in pred]
    classes = state["classes"]
    probs = np.stack([1 - pred, pred], axis=1) if state["task"] == "binary" else np.asarray(pred)
    labels = (pred > 0.5).astype(np.int64) if state["task"] == "binary" else probs.argmax(axis=1)
    out = []
    for label, p in zip(labels, probs):
        row = {key: classes[label]}
        if probabilities:
            row.update({f"prob_{c}": float(v) for c, v in zip(classes, p)})
        out.append(row)
    return out


def split_rows(state: dict, table: Table, test: np.ndarray, pred: np.ndarray, fold: int | None,
               probabilities: bool = True) -> list[dict]:
    """A split's test rows: the row's number in the table as read (as ``split.csv``), its fold, its target and the
    prediction columns."""
    truth = ([float(v) for v in table.y[test]] if table.task == "regression"
             else [table.classes[i] for i in table.y[test]])
    fold_col = {} if fold is None else {"fold": fold}
    return [{"row": int(table.rows[i]), **fold_col, state["target"]: t, **p}
            for i, t, p in zip(test, truth, prediction_columns(state, pred, probabilities))]


# =============================================================================================
# New rows in: the columns as training typed them
# =============================================================================================

def conform(frame, columns: list[dict], name: str, log=None):
    """The feature columns of ``frame`` typed as training typed them (extra columns ignored): a missing column, a
    word in a number column or an infinite number is one line naming ``name``, the column and the row."""
    import pandas as pd

    frame = frame.reset_index(drop=True)
    frame.columns = [str(c) for c in frame.columns]
    for col in columns:
        if col["name"] not in frame:
            raise ZooError(f"{name}: no column {col['name']!r}, which the model reads (it needs "
                           f"{column_list([c['name'] for c in columns])})")
    return pd.DataFrame({col["name"]: (as_categories(frame[col["name"]], col, name, log) if col["kind"] == "category"
                                       else as_numbers(frame[col["name"]], col["name"], name)) for col in columns})


def as_numbers(s, col: str, name: str):
    import pandas as pd

    if not pd.api.types.is_numeric_dtype(s) or s.dtype == bool:
        text = s.astype("string").str.strip()
        s = pd.to_numeric(text, errors="coerce")
        bad = np.where((text.notna() & (text != "") & s.isna()).to_numpy())[0]
        if len(bad):
            raise ZooError(f"{name} row {bad[0] + 2}: column {col!r} is {text.iloc[bad[0]]!r}, and the model reads a "
                           f"number there ({len(bad)} rows in all)")
    with np.errstate(over="ignore", invalid="ignore"):
        bad = np.where(np.isinf(s.to_numpy(np.float64, na_value=np.nan).astype(np.float32)))[0]
    if len(bad):
        raise ZooError(f"{name} row {bad[0] + 2}: column {col!r} is {s.iloc[bad[0]]}, not a finite (float32) number "
                       f"({len(bad)} rows in all)")
    return data.finite_feature(s, col, name)


def as_categories(s, col: dict, name: str = "", log=None):
    """As training read the column (stripped text, or the values as they are), on the training table's categories:
    a value never seen there is missing, as a missing value is."""
    import pandas as pd

    forms = [s.astype("string")]
    if pd.api.types.is_float_dtype(s) and (s.dropna() == s.dropna().round()).all():
        forms.append(s.astype("Int64").astype("string"))  # 3 read as 3.0 because of a gap: training saw "3"
    if col["strip"]:
        forms = [f.str.strip() for f in forms]
        forms = [f.where(f != "") for f in forms]
    text = max(forms, key=lambda f: int(f.isin(col["categories"]).sum()))
    unseen = text.notna() & ~text.isin(col["categories"])
    if log and unseen.any():
        examples = ", ".join(repr(v) for v in text[unseen].unique()[:3])
        log(f"{name}: column {col['name']!r}: {int(unseen.sum())} values the training table never had ({examples}): "
            "read as missing")
    return text.where(~unseen).astype(pd.CategoricalDtype(pd.Index(col["categories"], dtype="string")))


# =============================================================================================
# The predict driver both recipes' hooks call
# =============================================================================================

def predict(cfg, opts: TabularPredictOptions, run, load_split) -> Predictions:
    """``load_split(k, saved_split) -> fn(X, rows)``: split k's model on its features ``X`` (rows typed by
    ``conform``, then ``features.apply_features``). No ``data=``: the run's own splits, scored as training scored them
    (``test_*``/``val_*`` metrics); a file: every row, the splits' models averaged, and metrics when it has the
    target column."""
    state = json.loads(run.path(PREPROCESS).read_text())
    models = [load_split(k, split) for k, split in enumerate(state["splits"])]
    if not opts.data:
        return own_split(cfg, opts, run, state, models)
    path = Path(opts.data).expanduser()
    if not path.is_file():
        raise ZooError(f"data={opts.data}: no such file (a .csv, .tsv or .parquet table)")
    frame = data.read_file(path)
    X = conform(frame, state["columns"], str(path), run.log)
    rows = np.arange(len(X))
    preds = [fn(features.apply_features(X, split["features"]), rows) for fn, split in zip(models, state["splits"])]
    pred = preds[0] if len(preds) == 1 else np.mean(preds, axis=0)
    records = frame.astype(object).where(frame.notna(), None).to_dict("records")
    out = [{**r, **p} for r, p in zip(records, prediction_columns(state, pred, opts.probabilities))]
    return Predictions(rows=out, metrics=scored(state, frame, pred, str(path), run.log), arrays={"prediction": pred})


def own_split(cfg, opts, run, state: dict, models: list) -> Predictions:
    import functools

    table = data.load_table(cfg, run)
    parts = splits_for(cfg, table)
    names = [c["name"] for c in state["columns"]]
    if len(table.y) != state["rows"] or list(table.X.columns) != names or len(parts) != len(models):
        raise ZooError(f"{table.name}: not the table this run was trained on ({len(table.y)} rows, "
                       f"{len(table.X.columns)} columns; the run had {state['rows']}, {len(names)}); give data=FILE")
    X = conform(table.X, state["columns"], table.name)
    fitted = []
    for (_, val, test), fn, split in zip(parts, models, state["splits"]):
        fitted.append((functools.partial(fn, features.apply_features(X, split["features"], run.log)), val, test))
    metrics, preds = score_splits(run.log, table, fitted)
    rows = []
    for k, ((_, _, test), pred) in enumerate(zip(parts, preds)):
        rows += split_rows(state, table, test, pred, k if len(parts) > 1 else None, opts.probabilities)
    return Predictions(rows=rows, metrics=metrics, arrays={"prediction": np.concatenate(preds)})


def scored(state: dict, frame, pred: np.ndarray, name: str, log) -> dict[str, float]:
    """The task's metrics when the new rows carry the target (every value present and, for classes, known)."""
    target = state["target"]
    if target not in frame:
        return {}
    y = frame[target]
    if y.isna().any():
        log(f"{name}: {int(y.isna().sum())} rows have no {target!r}: no metrics")
        return {}
    if state["task"] == "regression":
        import pandas as pd

        values = pd.to_numeric(y, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        if not np.isfinite(values).all():
            log(f"{name}: {target!r} has values that are not finite numbers: no metrics")
            return {}
    else:
        index = {c: i for i, c in enumerate(state["classes"])}
        unknown = sorted(set(y.astype(str)) - set(index))
        if unknown:
            log(f"{name}: {target!r} has classes the model never saw ({', '.join(unknown[:5])}): no metrics")
            return {}
        values = y.astype(str).map(index).to_numpy(np.int64)
    table = Table(name, None, values, state["task"], state["classes"], None, [], [], np.arange(len(values)))
    return data.scores(table, np.arange(len(values)), pred)
