"""Metrics, each a plain function of predictions and targets, checked against reference implementations:
accuracy and macro-F1 on tensors (vision, contrastive), the Frechet distance of feature statistics (FID),
bits per byte (language models), and the scores of array predictions (tables, molecules, proteins):
RMSE, MAE, R², Spearman, Pearson, accuracy, macro-F1, ROC-AUC, PR-AUC."""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
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


def bootstrap(statistic: Callable[[np.ndarray], float], n_items: int, *, rounds: int = 1000, seed: int = 0,
              level: float = 0.95, draw: Callable | None = None) -> tuple[float, float]:
    """The percentile interval of a test metric over its items resampled with replacement: the noise of the test
    set itself (``statistic(indices)`` computes the metric on those items; ``draw(rng, n)`` resamples, by default
    item by item). A fixed seed: the same interval for the same predictions."""
    rng = np.random.default_rng(seed)
    draw = draw or (lambda g, n: g.integers(0, n, n))
    values = np.array([statistic(draw(rng, n_items)) for _ in range(rounds)], dtype=np.float64)
    return percentile_interval(values[np.isfinite(values)], level)


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` interval of bootstrap ``values`` (all finite); NaNs for none."""
    if len(values) == 0:
        return float("nan"), float("nan")
    tail = 100 * (1 - level) / 2
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def summarize_folds(results: list[dict[str, float]], log: Callable[[str], None]) -> dict[str, float]:
    """One split: its metrics. Several folds: each metric's mean, plus ``<metric>_std`` across folds
    (sample std; NaN where a fold's value is: e.g. R² of a fold of one row); the per-fold values go to ``log``."""
    if len(results) == 1:
        return results[0]
    out = {}
    for k in results[0]:
        values = np.asarray([r[k] for r in results], dtype=np.float64)
        out[k], out[f"{k}_std"] = float(values.mean()), float(values.std(ddof=1))
    log("per fold: " + "; ".join(", ".join(f"{k} {v:.4f}" for k, v in r.items()) for r in results))
    return out


# ---------------------------------------------------------------------------------------------
# Frechet distance between Gaussian fits of features (FID and its relatives)
# ---------------------------------------------------------------------------------------------

def gaussian_fit(features) -> tuple:
    """Mean and (unbiased) covariance of (n, d) features, in float64."""
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2 or len(f) < 2:
        raise ValueError(f"need (n >= 2, d) features, got shape {f.shape}")
    return f.mean(axis=0), np.cov(f, rowvar=False)


def _sqrt_psd(a):
    w, v = np.linalg.eigh((a + a.T) / 2)
    return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def frechet_distance(mu1, sigma1, mu2, sigma2) -> float:
    """||mu1 - mu2||^2 + tr(S1) + tr(S2) - 2 tr((S1 S2)^1/2), in float64.

    tr((S1 S2)^1/2) is computed as the sum of square roots of the eigenvalues of the symmetric PSD
    matrix S1^1/2 S2 S1^1/2 (same spectrum as S1 S2), so there is no non-symmetric sqrtm with complex
    round-off to discard, and rank-deficient covariances (fewer samples than features) are fine.
    """
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


# ---------------------------------------------------------------------------------------------
# Predictions against targets in arrays (tables, molecules, proteins): scikit-learn and SciPy
# ---------------------------------------------------------------------------------------------

def rmse(y, pred) -> float:
    from sklearn import metrics as skm

    return float(np.sqrt(skm.mean_squared_error(y, pred)))


def mae(y, pred) -> float:
    from sklearn import metrics as skm

    return float(skm.mean_absolute_error(y, pred))


def r2(y, pred) -> float:
    from sklearn import metrics as skm

    return float(skm.r2_score(y, pred))


# Spearman ranks values equal up to floating-point noise as ties. The same model on another memory layout or buffer
# alignment sums in another order (BLAS promises no bitwise result across them): a kernel ridge head saved and read
# back moved 4 of 120 predictions by up to 2.0e-15 at max|x| 2.5 (3.6 eps x max|x|); where duplicate sequences give
# near-equal predictions, such noise flipped a rank and moved val_spearman by 1e-6, the bound `zoo predict` promises.
# Sorted neighbours within TIE_EPS x eps x max|x| (eps of the values' own dtype: float32 predictions carry float32's
# noise) share their average rank: 18x the noise seen, and far below any difference a prediction means (float64:
# 1.4e-14 of the largest value; float32: 7.6e-6). Noise under half of it cannot swap two values; a pair's ranks
# change only where its true gap lies within that noise of the tolerance itself, never for duplicates (gap 0).
# Without near-ties the ranks are scipy's rankdata's.
TIE_EPS = 64


def tie_tolerance(values) -> float:
    """How close two of ``values`` must be to rank as a tie: TIE_EPS x eps of their dtype (at least float32's;
    0 for integers: exact ties) x the largest finite |value|."""
    x = np.asarray(values)
    if not np.issubdtype(x.dtype, np.floating) or x.size == 0:
        return 0.0
    finite = np.abs(x[np.isfinite(x)])
    scale = float(finite.max()) if finite.size else 0.0
    return TIE_EPS * float(np.finfo(np.result_type(x.dtype, np.float32)).eps) * scale


def tied_ranks(values, tol: float) -> np.ndarray:
    """1-based ranks of ``values`` (no NaN) where sorted neighbours within ``tol`` share their average rank, as
    scipy's ``rankdata`` does for exact ties (``tol`` 0: rankdata's ranks). A run of close values is cut where it
    passes ``tol`` from its first value, so dense values never merge into one wide tie."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    order = np.argsort(x, kind="stable")
    s = x[order]
    new = np.ones(len(s), dtype=bool)  # where a new rank starts
    with np.errstate(invalid="ignore"):  # inf - inf is NaN, not > tol: equal infinities tie too
        new[1:] = np.diff(s) > tol
        starts = np.flatnonzero(new)
        ends = np.append(starts[1:], len(s))
        wide = np.flatnonzero((ends - starts > 2) & (s[ends - 1] - s[starts] > tol))  # rare: 3+ chained past tol
    for start, end in zip(starts[wide], ends[wide]):
        anchor = s[start]
        for i in range(start + 1, end):
            if s[i] - anchor > tol:
                new[i], anchor = True, s[i]
    if len(wide):
        starts = np.flatnonzero(new)
        ends = np.append(starts[1:], len(s))
    group = np.cumsum(new) - 1
    ranks = np.empty(len(s))
    ranks[order] = ((starts + 1 + ends) / 2)[group]  # the average of ranks start+1 .. end
    return ranks


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r of two rank vectors (Spearman's rho); 0 where either is constant (no ranks to correlate)."""
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum() / denom) if denom > 0 else 0.0


def spearman(y, pred) -> float:
    """Spearman's rank correlation, values equal up to floating-point noise ranked as ties (``TIE_EPS``): scipy's
    spearmanr wherever no two values are that close. 0 for a constant prediction (it has no ranks); NaN anywhere:
    NaN, as spearmanr."""
    y, pred = np.asarray(y).reshape(-1), np.asarray(pred).reshape(-1)
    if np.isnan(y).any() or np.isnan(pred).any():
        return float("nan")
    return rank_correlation(tied_ranks(y, tie_tolerance(y)), tied_ranks(pred, tie_tolerance(pred)))


def pearson(y, pred) -> float:
    """Pearson's correlation; 0 for a constant prediction."""
    from scipy import stats

    pred = np.asarray(pred).reshape(-1)
    return 0.0 if np.ptp(pred) == 0 else float(stats.pearsonr(y, pred)[0])


def bits_per_byte(nats: float, n_bytes: float) -> float:
    """Summed cross-entropy (nats) over the bytes the predicted tokens spell: comparable across tokenizers."""
    return nats / (math.log(2) * n_bytes)


def _labels(pred: np.ndarray, task: str) -> np.ndarray:
    return (pred > 0.5).astype(int) if task == "binary" else pred.argmax(axis=1)


def _roc_auc(y, pred, task: str) -> float | None:
    from sklearn import metrics as skm

    if len(np.unique(y)) < 2:
        return None  # undefined on one class
    return float(skm.roc_auc_score(y, pred, multi_class="ovr") if task == "multiclass" else skm.roc_auc_score(y, pred))


def _pr_auc(y, pred, task: str) -> float | None:
    from sklearn import metrics as skm

    return float(skm.average_precision_score(y, pred)) if task == "binary" and len(np.unique(y)) > 1 else None


def _accuracy(y, pred, task: str) -> float:
    from sklearn import metrics as skm

    return float(skm.accuracy_score(y, _labels(pred, task)))


def _macro_f1(y, pred, task: str) -> float:
    from sklearn import metrics as skm

    return float(skm.f1_score(y, _labels(pred, task), average="macro"))


SCORES: dict[str, Callable] = {
    "rmse": lambda y, p, task: rmse(y, p), "mae": lambda y, p, task: mae(y, p), "r2": lambda y, p, task: r2(y, p),
    "spearman": lambda y, p, task: spearman(y, p), "pearson": lambda y, p, task: pearson(y, p),
    "accuracy": _accuracy, "macro_f1": _macro_f1, "roc_auc": _roc_auc, "pr_auc": _pr_auc,
}


def score(y, pred, task: str, names: tuple[str, ...]) -> dict[str, float]:
    """The named metrics of predictions ``pred`` against targets ``y``. ``task``: regression (values) | binary
    (``pred`` = P(class 1); labels at 0.5) | multiclass (``pred`` = (n, classes) scores; labels by argmax).
    A metric undefined on these targets (ROC-AUC on one class) is left out."""
    out = {}
    for name in names:
        value = SCORES[name](y, pred, task)
        if value is not None:
            out[name] = value
    return out


def score_tasks(y, pred, task: str, names: tuple[str, ...]) -> dict[str, float]:
    """``score`` per column of (n, tasks) targets, rows with a missing (NaN) target left out of their column,
    then each metric's mean over the columns. A classification column with one class is left out whole."""
    per_task: dict[str, list[float]] = {}
    for t in range(y.shape[1]):
        ok = ~np.isnan(y[:, t])
        yt, pt = y[ok, t], pred[ok, t]
        if task != "regression" and len(np.unique(yt)) < 2:
            continue
        for k, v in score(yt, pt, task, names).items():
            per_task.setdefault(k, []).append(v)
    return {k: float(np.mean(v)) for k, v in per_task.items()}
