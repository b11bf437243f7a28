"""How a protein run is scored (the core's ``metrics.score``): the metrics of each task, the primary one's
bootstrap statistic, and the final model's test metrics, scored once, with their 95% interval."""
from __future__ import annotations

import numpy as np

from recipe_zoo.core.metrics import bootstrap, rank_correlation, score, tie_tolerance, tied_ranks
from recipe_zoo.recipes.protein.sequences import ProteinData


# task -> (the core's task, the metrics reported): regression Spearman (primary), Pearson, RMSE; classification
# (predictions are (n, classes) scores) accuracy (primary), macro-F1
SCORING = {"regression": ("regression", ("spearman", "pearson", "rmse")),
           "classification": ("multiclass", ("accuracy", "macro_f1"))}


def primary_metric(task: str) -> tuple[str, bool]:
    return ("spearman", True) if task == "regression" else ("accuracy", True)


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
