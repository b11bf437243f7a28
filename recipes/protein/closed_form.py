"""Ridge and RBF kernel ridge in closed form, the heads protein/onehot and protein/esm-embed fit on fixed features:
every candidate fitted on train and scored on validation, the best kept; under a time limit the grid shrinks to
what fits (kernel ridge on fewer rows first, then fewer ridge alphas). ``Features`` is the feature scaling both
these heads and the MLP head fit on the training rows."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import scipy.stats  # noqa: F401  (score's Pearson: imported with the recipe, not on the closed form's clock)
import torch
from scipy.linalg import cho_solve

from recipe_zoo.core import splits
from recipe_zoo.core.metrics import score
from recipe_zoo.core.precision import choose_device
from recipe_zoo.recipes.protein.scoring import SCORING, primary_metric
from recipe_zoo.recipes.protein.sequences import ProteinData


RIDGE_ALPHAS = np.logspace(-2, 5, 22)
KRR_ALPHAS = (0.01, 0.03, 0.1, 0.3, 1.0)
KRR_GAMMAS = (0.25, 0.5, 1.0, 2.0, 4.0)  # x 1 / (median squared distance between training rows)
KRR_MAX_ROWS = 20000  # kernel ridge is O(n^3): past this, head=auto keeps to ridge
KRR_MIN_ROWS = 200  # under a seconds budget kernel ridge shrinks to a subsample of the training rows, not below this


@dataclass
class Features:
    """Features standardised (or centred) on the rows they were fitted on; constant columns dropped."""
    keep: np.ndarray
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray, scale: bool) -> Features:
        std = X.std(axis=0)
        keep = np.where(std > 1e-8)[0]
        return cls(keep, X[:, keep].mean(axis=0), std[keep] if scale else np.ones(len(keep), dtype=X.dtype))

    def __call__(self, X: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((X[:, self.keep] - self.mean) / self.std).double()


def targets_matrix(data: ProteinData, idx: np.ndarray) -> tuple[torch.Tensor, float, float]:
    """(n, outputs) centred targets: standardised values, or one-hot classes (least-squares classification)."""
    if data.task == "regression":
        mean, std = float(data.y[idx].mean()), float(data.y[idx].std()) or 1.0
        return torch.from_numpy((data.y[idx] - mean) / std).double().unsqueeze(1), mean, std
    onehot = np.eye(len(data.classes))[data.y[idx]]
    return torch.from_numpy(onehot - onehot.mean(axis=0)).double(), 0.0, 1.0


def sq_distances(A: torch.Tensor, B: torch.Tensor, AB: torch.Tensor | None = None) -> torch.Tensor:
    """Squared Euclidean distances, from the inner products ``AB`` (A @ B.T) when they are at hand."""
    AB = A @ B.T if AB is None else AB
    return (A.square().sum(1, keepdim=True) + B.square().sum(1) - 2 * AB).clamp_(min=0)


def median_sq_distance(X: torch.Tensor, seed: int = 0) -> float:
    g = torch.Generator().manual_seed(seed)
    sample = X[torch.randperm(len(X), generator=g)[:1000].to(X.device)]
    d = sq_distances(sample, sample)
    return float(d[d > 0].median()) if (d > 0).any() else 1.0


@dataclass
class ClosedForm:
    """A ridge or kernel ridge fitted on (some of) the training rows; predicts rows from their raw features."""
    head: str  # ridge | krr
    alpha: float
    feats: Features
    coef: torch.Tensor  # primal weights (features, outputs), or dual coefficients (basis rows, outputs)
    basis: torch.Tensor | None  # the training rows' features (dual ridge, kernel ridge); None: primal ridge
    gamma: float = 0.0
    mean: float = 0.0
    std: float = 1.0

    def predict(self, X: np.ndarray) -> np.ndarray:
        Xs = self.feats(X).to(self.coef.device)
        if self.basis is None:
            pred = Xs @ self.coef
        elif self.head == "ridge":
            pred = (Xs @ self.basis.T) @ self.coef
        else:
            pred = torch.exp(-self.gamma * sq_distances(Xs, self.basis)) @ self.coef
        return pred.cpu().numpy() * self.std + self.mean


def closed_form_device(run) -> torch.device:
    """Where the closed-form heads solve (float64): a CUDA device when the run has one, else the CPU."""
    device = choose_device(run.device)
    return device if device.type == "cuda" else torch.device("cpu")


# Under a seconds budget the grid is planned from counted work, never from a timing (a timed probe planned
# different grids on the same machine: docs/LOG.md#2026-12-04-protein-closed-form-grid). One fit of an r x r system
# is r^3 / 3 FLOPs of Cholesky and 2 r^2 per target of triangular solves, at this share of the device's fp32 peak
# (flops.peak_flops, measured once per CPU and cached): the same machine plans the same grid on every run,
# whatever else it is doing.
CHOLESKY_SHARE = {
    # cpu: under the shares benchmarks/cholesky_share.py measured from 1,000 rows (the same log entry): the plan
    # errs on the side of the budget, and the kernels and scoring around the fits are not counted.
    "cpu": 0.2,
    "cuda": 0.005,  # a guess, unmeasured (fp64 Cholesky on an H200 against its dense bf16 datasheet peak)
}


def fit_flops(rows: int, targets: int = 1) -> float:
    """The work of one closed-form fit of a (rows x rows) system: Cholesky, then two triangular solves."""
    return rows**3 / 3 + 2 * rows**2 * targets


def closed_form_rate(device: torch.device) -> float:
    """FLOP/s the closed-form fits are planned at on ``device``: its fp32 peak x CHOLESKY_SHARE."""
    from recipe_zoo.core.flops import peak_flops

    peak = peak_flops(device, "fp32") or peak_flops(torch.device("cpu"), "fp32")
    return peak * CHOLESKY_SHARE.get(device.type, CHOLESKY_SHARE["cpu"])


class Clock:
    """The closed form's time limit, counted: each fit is charged ``fit_flops`` at ``rate`` FLOP/s and the plan reads
    only that count. The wall clock is a safety valve, not a decision: a machine running far slower than planned
    (past twice the limit) drops the fits left, and says so."""

    def __init__(self, device: torch.device, limit: float | None):
        self.device, self.limit, self.start = device, limit, time.perf_counter()
        self.rate = None if limit is None else closed_form_rate(device)
        self.counted = 0.0  # seconds charged for the fits done so far

    def elapsed(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - self.start

    def fit_seconds(self, rows: int) -> float:
        return fit_flops(rows) / self.rate

    def fit(self, solve, rows: int):
        if self.limit is not None:
            self.counted += self.fit_seconds(rows)
        return solve()

    def overrun(self) -> bool:
        """The wall clock past twice the limit: the plan was far off on this machine (or it is very busy)."""
        return self.limit is not None and self.elapsed() > 2 * self.limit


def solve_spd(M: torch.Tensor, alpha: float, Y: torch.Tensor) -> torch.Tensor:
    """(M + alpha I)^-1 Y by Cholesky. On the CPU the two triangular solves go to scipy: torch's (MKL, one
    right-hand side) take 20x longer than the factorisation itself on a busy 2-core machine."""
    A = M.clone()
    A.diagonal().add_(alpha)
    L = torch.linalg.cholesky(A)
    if L.device.type != "cpu":
        return torch.cholesky_solve(Y, L)
    return torch.from_numpy(cho_solve((L.numpy(), True), Y.numpy(), check_finite=False))


def plan_grid(clock: Clock, kinds: list[str], k: int, n: int, log) -> tuple[list[float], int]:
    """Under a time limit, what of the grid fits in its counted seconds: (ridge alphas, kernel ridge rows; 0 = none).
    Kernel ridge shrinks first (the largest sizes dropped: half the rows, a quarter, ...), then ridge keeps an evenly
    spread subset."""
    alphas = list(RIDGE_ALPHAS) if "ridge" in kinds else []
    krr_fits = len(KRR_GAMMAS) * len(KRR_ALPHAS) if "krr" in kinds else 0
    if clock.limit is None:
        return alphas, n if krr_fits else 0
    left = 0.9 * clock.limit  # a margin for the kernels and the scoring around the fits
    ridge_cost = len(alphas) * clock.fit_seconds(k)
    full = ridge_cost + krr_fits * clock.fit_seconds(n)
    if full <= left:
        return alphas, n if krr_fits else 0
    rows = n if krr_fits else 0
    while rows and ridge_cost + krr_fits * clock.fit_seconds(rows) > left:
        rows = rows // 2 if rows // 2 >= KRR_MIN_ROWS else 0
    if ridge_cost > left:
        keep = max(1, int(left / clock.fit_seconds(k)))  # evenly spread, centred: one alpha is the middle one
        alphas = [alphas[i] for i in np.unique(((np.arange(keep) + 0.5) * len(alphas) / keep).astype(int))]
    parts = [f"ridge {len(alphas)} of {len(RIDGE_ALPHAS)} alphas"] if "ridge" in kinds else []
    if krr_fits:
        parts.append(f"kernel ridge on {rows} of the {n} training rows (a hash-chosen subsample)" if rows else
                     f"kernel ridge dropped (not even {KRR_MIN_ROWS} rows fit)")
    log(f"budget: the full closed-form grid counts ~{full:.1f}s at {clock.rate / 1e9:,.1f} GFLOP/s of the "
        f"{clock.limit:.1f}s it has; the grid shrinks: {'; '.join(parts)}")
    return alphas, rows


def select_closed_form(data: ProteinData, X: np.ndarray, scale: bool, kinds: list[str], limit: float | None = None,
                       log=print, device: torch.device | None = None,
                       clock: Clock | None = None) -> tuple[list[dict], ClosedForm | None]:
    """Every (head, hyperparameter) candidate fitted on train and scored on validation; the best one, fitted.
    ``limit``: seconds for all of it (the grid shrinks to fit, said in ``log``); None: the full grid. ``clock``:
    what counts the fits against the limit (default: ``device``'s planned rate)."""
    train, val, _ = data.split
    clock = clock or Clock(device or torch.device("cpu"), limit)
    metric = primary_metric(data.task)[0]
    feats = Features.fit(X[train], scale)
    Xt, Xv = feats(X[train]).to(clock.device), feats(X[val]).to(clock.device)
    Y, mean, std = targets_matrix(data, train)
    Y = Y.to(clock.device)
    n, d = Xt.shape
    primal = d <= n  # ridge solves the smaller of the (d x d) and (n x n) systems
    alphas, krr_rows = plan_grid(clock, kinds, min(n, d), n, log)
    out: list[dict] = []
    best: list = [None, None]  # (validation value, ClosedForm)
    dropped = 0

    def consider(cand: dict, pred: torch.Tensor, model: ClosedForm) -> None:
        cand["val"] = score(data.y[val], pred.cpu().numpy() * std + mean, *SCORING[data.task])
        out.append(cand)
        if best[0] is None or cand["val"][metric] > best[0]:
            best[0], best[1] = cand["val"][metric], model

    gram = None
    if alphas:
        if primal:
            A, B = Xt.T @ Xt, Xt.T @ Y
        else:
            gram = Xt @ Xt.T
            A, B, cross = gram, Y, Xv @ Xt.T
        for alpha in alphas:
            if out and clock.overrun():
                dropped += 1
                continue
            W = clock.fit(functools.partial(solve_spd, A, float(alpha), B), len(A))
            consider({"head": "ridge", "alpha": float(alpha)}, Xv @ W if primal else cross @ W,
                     ClosedForm("ridge", float(alpha), feats, W, None if primal else Xt, mean=mean, std=std))
    if krr_rows:
        rows = torch.arange(n, device=clock.device)
        if krr_rows < n:  # the same subsample for any seed and row order: the rows' keys in hash order
            keys = data.keys if data.keys is not None else [str(i) for i in range(len(data.y))]
            order = np.argsort([splits.hash_unit(keys[i], "kernel ridge") for i in train], kind="stable")
            rows = torch.from_numpy(np.sort(order[:krr_rows])).to(clock.device)
        Xb = Xt[rows]
        D = sq_distances(Xb, Xb, None if gram is None else gram[rows][:, rows])
        Dv = sq_distances(Xv, Xb)
        scale_sq = median_sq_distance(Xt)
        for g in KRR_GAMMAS:
            K, Kv = torch.exp(-(g / scale_sq) * D), torch.exp(-(g / scale_sq) * Dv)
            Yb = Y[rows]
            for alpha in KRR_ALPHAS:
                if out and clock.overrun():
                    dropped += 1
                    continue
                c = clock.fit(functools.partial(solve_spd, K, alpha, Yb), len(K))
                consider({"head": "krr", "alpha": alpha, "gamma": g / scale_sq, "gamma_rel": g, "rows": len(K)},
                         Kv @ c, ClosedForm("krr", alpha, feats, c, Xb, gamma=g / scale_sq, mean=mean, std=std))
    if dropped:
        log(f"budget: {dropped} closed-form fits dropped: {clock.elapsed():.1f}s on the wall clock, past twice the "
            f"{clock.limit:.1f}s planned (this machine ran far slower than the plan's rate; this grid is not the "
            "planned one)")
    how = [f"ridge on the {'primal' if primal else 'dual'} {min(n, d)} x {min(n, d)} system"] if alphas else []
    how += [f"kernel ridge on {krr_rows} x {krr_rows}"] if krr_rows else []
    counted = f", counted {clock.counted:.1f}s" if clock.limit is not None else ""
    log(f"closed form: {len(out)} candidates fitted on train and scored on validation in {clock.elapsed():.1f}s"
        f"{counted} ({', '.join(how)})")
    return out, best[1]
