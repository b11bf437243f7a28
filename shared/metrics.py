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


# ---------------------------------------------------------------------------------------------
# Frechet distance between Gaussian fits of features (FID and its relatives)
# ---------------------------------------------------------------------------------------------

def gaussian_fit(features) -> tuple:
    """Mean and (unbiased) covariance of (n, d) features, in float64."""
    import numpy as np

    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2 or len(f) < 2:
        raise ValueError(f"need (n >= 2, d) features, got shape {f.shape}")
    return f.mean(axis=0), np.cov(f, rowvar=False)


def _sqrt_psd(a):
    import numpy as np

    w, v = np.linalg.eigh((a + a.T) / 2)
    return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def frechet_distance(mu1, sigma1, mu2, sigma2) -> float:
    """||mu1 - mu2||^2 + tr(S1) + tr(S2) - 2 tr((S1 S2)^1/2), in float64.

    tr((S1 S2)^1/2) is computed as the sum of square roots of the eigenvalues of the symmetric PSD
    matrix S1^1/2 S2 S1^1/2 (same spectrum as S1 S2), so there is no non-symmetric sqrtm with complex
    round-off to discard, and rank-deficient covariances (fewer samples than features) are fine.
    """
    import numpy as np

    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    s1, s2 = np.asarray(sigma1, np.float64), np.asarray(sigma2, np.float64)
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (len(mu1), len(mu1)):
        raise ValueError(f"mismatched Gaussian fits: {mu1.shape}, {s1.shape} vs {mu2.shape}, {s2.shape}")
    root = _sqrt_psd(s1)
    middle = root @ s2 @ root
    eig = np.linalg.eigvalsh((middle + middle.T) / 2)
    trace_sqrt = np.sqrt(np.clip(eig, 0, None)).sum()
    diff = mu1 - mu2
    return float(max(0.0, diff @ diff + np.trace(s1) + np.trace(s2) - 2 * trace_sqrt))
