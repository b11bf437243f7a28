"""The protocol both tabular recipes follow on a table: its splits (``split.py``) and each split's features
(``prepare``; ``stream.prepare`` for a table read a chunk at a time), a model fitted on each split's training rows and
chosen on its validation rows (``over_splits``), then the test rows scored once (``score_splits``), and what ``zoo
doctor`` is shown of the first split.

Everything that chooses (depth, log target, early stopping, the best state) reads validation; the recipes' fit
functions never see the test rows, which are scored once, after every model is final.
"""
from __future__ import annotations

import numpy as np

from recipe_zoo.core import items
from recipe_zoo.core.metrics import summarize_folds
from recipe_zoo.recipes.tabular import features
from recipe_zoo.recipes.tabular.config import TabularConfig
from recipe_zoo.recipes.tabular.data import Table, load_table, primary_metric, scores
from recipe_zoo.recipes.tabular.split import record_split, splits_for

# =============================================================================================
# Each split's features
# =============================================================================================

def prepare(cfg: TabularConfig, run) -> tuple[Table, list]:
    """The table, read whole, and ``split_views``: each split's features fitted on its training and validation rows,
    its fitting rows the neighbour bank."""
    table = load_table(cfg, run)
    classes = "" if table.classes is None else " (" + ", ".join(table.classes[:5]) + ")"
    return table, split_views(cfg, run, table, lambda fit, val: (np.concatenate([fit, val]), fit), classes)


def split_views(cfg: TabularConfig, run, table, feature_rows, detail: str) -> list:
    """The table's splits (recorded in ``split.csv``) and each split's features (engineering adds columns the log
    reports): a list of (features, training rows, validation rows, test rows, feature plan). ``feature_rows(fit,
    val)``: (the rows of ``table.X`` a split's feature plan is fitted on, its neighbour bank); ``detail`` ends the
    log's line on the table."""
    metric, higher = primary_metric(table.task)
    run.set_metric(f"test_{metric}", higher)
    splits = splits_for(cfg, table)
    record_split(run, cfg, table, splits)
    views = []
    for fit, val, test in splits:
        rows, bank = feature_rows(fit, val)
        X, plan = features.features_for(cfg, table, rows, run, bank=bank)
        views.append((X, fit, val, test, plan))
    for note in dict.fromkeys(table.notes):
        run.log(f"{table.name}: {note}")
    X = views[0][0]
    n_cat = sum(str(X[c].dtype) == "category" for c in X.columns)
    run.log(f"{table.name}: {len(table.y)} rows, {X.shape[1]} features ({n_cat} categorical), {table.task}{detail}")
    run.report("rows_features", f"{len(table.y)} x {X.shape[1]}")
    return views


def inspect_split(run, table: Table, views: list, loop: bool, fine_tune: bool = False) -> None:
    """The first split's training and validation rows for ``zoo doctor`` (never the test rows). Missing numbers
    shown as the network takes them, the median plus a missing flag (XGBoost takes NaN natively): the rows stay
    equal exactly when the table's rows are."""
    if not run.inspecting:
        return
    X, train, val, *_ = views[0]
    num = X.select_dtypes("number")
    shown = X.fillna(num.median()).join(num.isna().loc[:, num.isna().any()].add_suffix(" missing"))
    run.inspect(train=(shown.iloc[train], table.y[train]), val=(shown.iloc[val], table.y[val]),
                task="regression" if table.task == "regression" else "classification",
                num_classes=None if table.classes is None else len(table.classes), loop=loop, fine_tune=fine_tune)


# =============================================================================================
# The fits on each split, and the test rows scored once
# =============================================================================================

def over_splits(run, table: Table, views: list, fit_one) -> tuple[dict, list, float, list]:
    """``fit_one(k, X, train, val) -> (predict, stats)`` on each split, where ``predict(rows)`` gives the final
    model's predictions; fit_one never sees the test rows. Once every split is fitted: the metrics
    (``score_splits``), each split's stats, the training seconds in all and each split's test predictions."""
    fitted, stats, total = [], [], 0.0
    for k, (X, train, val, test, _) in enumerate(views):
        predict, split_stats = fit_one(k, X, train, val)
        total += split_stats["train_seconds"]
        stats.append(split_stats)
        fitted.append((predict, val, test))
    metrics, test_preds = score_splits(run.log, table, fitted)
    return metrics, stats, total, test_preds


def score_splits(log, table: Table, fitted: list) -> tuple[dict, list]:
    """The validation and test metrics of (predict, validation rows, test rows) per split (mean ± std over folds),
    the primary metric's 95% bootstrap interval over the test rows (of all folds, pooled), and each split's test
    predictions. Training calls it once every model is final; ``zoo predict`` again with the saved models."""
    results, pooled_y, pooled_pred = [], [], []
    for predict, val, test in fitted:  # the test rows are read here, and only here
        val_pred, test_pred = predict(val), predict(test)
        results.append({**{f"test_{m}": v for m, v in scores(table, test, test_pred).items()},
                        **{f"val_{m}": v for m, v in scores(table, val, val_pred).items()}})
        pooled_y.append(table.y[test])
        pooled_pred.append(test_pred)
    metrics = summarize_folds(results, log)
    metric = primary_metric(table.task)[0]
    low, high = items.test_interval(item_scores(np.concatenate(pooled_y), np.concatenate(pooled_pred), table.task))
    metrics[f"test_{metric}_ci_low"], metrics[f"test_{metric}_ci_high"] = low, high
    return metrics, pooled_pred


def item_scores(y: np.ndarray, pred: np.ndarray, task: str) -> items.ItemScores:
    """The primary metric per row: squared errors (RMSE), or hits (accuracy; labels as ``metrics.score`` takes
    them)."""
    if task == "regression":
        return items.rms_of(y, pred)
    labels = (pred > 0.5).astype(np.int64) if task == "binary" else np.asarray(pred).argmax(axis=1)
    return items.mean_of(labels == y)
