"""How the molecules are scored (``recipe_zoo.core.metrics.score_tasks``), per target and averaged over targets,
missing targets ignored: the validation and test metrics of every split once its models are final (``finish``:
the recipes' fit functions never see the test molecules), with a bootstrap interval over the test molecules.
"""
from __future__ import annotations

import numpy as np

from recipe_zoo.core.errors import ZooError
from recipe_zoo.core import items
from recipe_zoo.core.metrics import score_tasks, summarize_folds
from recipe_zoo.recipes.molecules.table import MolTable


# What each task reports, per target column (rows without a target left out; a classification column with one
# class left out whole), then the mean over the columns. The core calls a 0/1 column "binary".
METRIC_NAMES = {"regression": ("rmse", "mae", "r2"), "classification": ("roc_auc", "pr_auc", "macro_f1")}
SCORE_TASK = {"regression": "regression", "classification": "binary"}


def primary_metric(task: str) -> tuple[str, bool]:
    return ("rmse", False) if task == "regression" else ("roc_auc", True)


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
    low, high = items.test_interval(item_scores(y, pred, table.task))
    metrics[f"test_{metric}_ci_low"], metrics[f"test_{metric}_ci_high"] = low, high
    return metrics


def item_scores(y: np.ndarray, pred: np.ndarray, task: str) -> items.ItemScores:
    """The primary metric per molecule: masked squared errors (RMSE per target, then the mean over targets), or
    targets and predictions for ROC-AUC by ``score_tasks``."""
    if task == "regression":
        return items.rms_of(y, pred)
    return items.ItemScores("task", {"y": np.asarray(y, np.float64), "pred": np.asarray(pred, np.float64)},
                            params={"task": SCORE_TASK[task], "metric": primary_metric(task)[0]})
