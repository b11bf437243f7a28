"""Metrics, each a plain function of predictions and targets (tested against scikit-learn)."""
from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def accuracy(preds: torch.Tensor, targets: torch.Tensor) -> float:
    """Top-1 accuracy from class predictions (N,) or logits (N, C)."""
    if preds.ndim == 2:
        preds = preds.argmax(dim=1)
    return (preds == targets).float().mean().item()


def confusion_matrix(preds: torch.Tensor, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(C, C) counts; rows are true classes, columns predicted."""
    idx = targets.long() * num_classes + preds.long()
    return torch.bincount(idx, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def macro_f1(preds: torch.Tensor, targets: torch.Tensor, num_classes: int | None = None) -> float:
    """Unweighted mean of per-class F1 over the classes present in targets or predictions."""
    if preds.ndim == 2:
        preds = preds.argmax(dim=1)
    num_classes = num_classes or int(max(preds.max(), targets.max()).item()) + 1
    cm = confusion_matrix(preds, targets, num_classes).double()
    tp = cm.diag()
    support, predicted = cm.sum(1), cm.sum(0)
    denom = support + predicted
    present = denom > 0
    f1 = torch.where(present, 2 * tp / denom.clamp(min=1), torch.zeros_like(tp))
    return (f1[present].mean()).item()


def summarize_folds(results: list[dict[str, float]], log: Callable[[str], None]) -> dict[str, float]:
    """One split: its metrics. Several folds: each metric's mean, plus ``<metric>_std`` across folds
    (sample std); the per-fold values go to ``log``."""
    if len(results) == 1:
        return results[0]
    out = {}
    for k in results[0]:
        values = [r[k] for r in results]
        out[k], out[f"{k}_std"] = statistics.fmean(values), statistics.stdev(values)
    log("per fold: " + "; ".join(", ".join(f"{k} {v:.4f}" for k, v in r.items()) for r in results))
    return out
