"""How a protein run is scored (the core's ``metrics.score``): the metrics of each task, the primary one's
bootstrap statistic, and the final model's test metrics, scored once, with their 95% interval."""
from __future__ import annotations

import numpy as np

from recipe_zoo.core import items
from recipe_zoo.core.metrics import score
from recipe_zoo.recipes.protein.sequences import ProteinData


# task -> (the core's task, the metrics reported): regression Spearman (primary), Pearson, RMSE; classification
# (predictions are (n, classes) scores) accuracy (primary), macro-F1
SCORING = {"regression": ("regression", ("spearman", "pearson", "rmse")),
           "classification": ("multiclass", ("accuracy", "macro_f1"))}


def primary_metric(task: str) -> tuple[str, bool]:
    return ("spearman", True) if task == "regression" else ("accuracy", True)


def item_scores(y: np.ndarray, pred: np.ndarray, task: str) -> items.ItemScores:
    """The primary metric per item: targets and predictions for Spearman (ranked as ``metrics.spearman`` ranks,
    values equal up to floating-point noise tied, with the whole test set's tolerance in every resample; 0 for a
    constant prediction), or hits for accuracy."""
    if task != "regression":
        return items.mean_of(np.asarray(pred).argmax(axis=1) == y)
    return items.spearman_of(y, pred)


def final_metrics(data: ProteinData, val_value: float, test_pred: np.ndarray) -> dict[str, float]:
    """The test metrics of the final model (scored once, here), its validation value and the primary metric's 95%
    bootstrap interval over the test items."""
    test = data.split[2]
    metric = primary_metric(data.task)[0]
    out = {f"test_{k}": v for k, v in score(data.y[test], test_pred, *SCORING[data.task]).items()}
    out[f"val_{metric}"] = val_value
    low, high = items.test_interval(item_scores(data.y[test], test_pred, data.task))
    out[f"test_{metric}_ci_low"], out[f"test_{metric}_ci_high"] = low, high
    return out


def finish(metrics: dict, data: ProteinData) -> dict:
    metrics["sequences" if data.seqs is not None else "rows"] = len(data.y)
    return metrics
