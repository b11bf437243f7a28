"""The heads on fixed features (protein/onehot, protein/esm-embed): ridge and RBF kernel ridge in closed form, every
candidate fitted on train and scored on validation (under a seconds budget the grid shrinks to what fits); an MLP
head through the core loop; and the supervised fit through the core loop that protein/esm-finetune shares."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import scipy.stats  # noqa: F401  (score's Pearson: imported with the recipe, not on the closed form's clock)
import torch
import torch.nn.functional as F
from scipy.linalg import cho_solve
from torch import nn

from recipe_zoo.core import optim, schedule, splits
from recipe_zoo.core.batches import TensorBatches, to_device
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.loop import LoopSettings, fit, peak_memory_mb
from recipe_zoo.core.weights import BestState
from recipe_zoo.core.metrics import score
from recipe_zoo.core.precision import choose_device
from recipe_zoo.recipes.protein.config import HeadFields
from recipe_zoo.recipes.protein.data import SCORING, ProteinData, final_metrics, primary_metric

# =============================================================================================
# Ridge and RBF kernel ridge in closed form
# =============================================================================================

RIDGE_ALPHAS = np.logspace(-2, 5, 22)
KRR_ALPHAS = (0.01, 0.03, 0.1, 0.3, 1.0)
KRR_GAMMAS = (0.25, 0.5, 1.0, 2.0, 4.0)  # x 1 / (median squared distance between training rows)
KRR_MAX_ROWS = 20000  # kernel ridge is O(n^3): past this, head=auto keeps to ridge
KRR_MIN_ROWS = 200  # under a seconds budget kernel ridge shrinks to a subsample of the training rows, not below this
AUTO_CLOSED_SHARE = 0.5  # head=auto under a seconds budget: the closed-form grid's share; the MLP gets the rest


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


def rbf(A: torch.Tensor, B: torch.Tensor, gamma: float) -> torch.Tensor:
    return torch.exp(-gamma * sq_distances(A, B))


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


class Clock:
    """Seconds since the start, and what one Cholesky fit of a (rows x rows) system costs: as timed at that size,
    else scaled by rows^3 from the nearest size timed."""

    def __init__(self, device: torch.device, limit: float | None):
        self.device, self.limit, self.start = device, limit, time.perf_counter()
        self.seen: dict[int, float] = {}  # rows -> seconds of the last fit timed at that size

    def elapsed(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - self.start

    def timed(self, fn, rows: int):
        t = self.elapsed()
        out = fn()
        self.seen[rows] = self.elapsed() - t
        return out

    def fit_seconds(self, rows: int) -> float:
        if rows in self.seen:
            return self.seen[rows]
        near = min(self.seen, key=lambda r: abs(np.log(r / rows)))
        return self.seen[near] * (rows / near) ** 3

    def fits(self, seconds: float) -> bool:
        """Whether a step of about ``seconds`` ends within the limit (with half a step to spare: timings vary)."""
        return self.limit is None or self.elapsed() + 1.5 * seconds <= self.limit


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
    """Under a time limit, what of the grid fits: (ridge alphas, kernel ridge rows; 0 = none). Kernel ridge shrinks
    first (the largest sizes dropped: half the rows, a quarter, ...), then ridge keeps an evenly spread subset."""
    alphas = list(RIDGE_ALPHAS) if "ridge" in kinds else []
    krr_fits = len(KRR_GAMMAS) * len(KRR_ALPHAS) if "krr" in kinds else 0
    if clock.limit is None:
        return alphas, n if krr_fits else 0
    solve_spd(*probe_system(64, clock.device))  # the first call into the solver warms it up: not a timing
    probe = probe_system(min(n, 1000), clock.device)
    clock.timed(lambda: solve_spd(*probe), len(probe[0]))
    left = 0.9 * (clock.limit - clock.elapsed())  # a margin for the kernels and the scoring around the fits
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
    log(f"budget: the full closed-form grid would take ~{full + clock.elapsed():.1f}s of the {clock.limit:.1f}s it "
        f"has; the grid shrinks: {'; '.join(parts)}")
    return alphas, rows


def probe_system(m: int, device: torch.device) -> tuple[torch.Tensor, float, torch.Tensor]:
    """A well-conditioned m x m system to time one Cholesky fit on."""
    A = torch.randn(m, m, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(device)
    return A @ A.T / m, 1.0, torch.ones(m, 1, dtype=torch.float64, device=device)


def select_closed_form(data: ProteinData, X: np.ndarray, scale: bool, kinds: list[str], limit: float | None = None,
                       log=print, device: torch.device | None = None,
                       clock: Clock | None = None) -> tuple[list[dict], ClosedForm | None]:
    """Every (head, hyperparameter) candidate fitted on train and scored on validation; the best one, fitted.
    ``limit``: seconds for all of it (the grid shrinks to fit, said in ``log``); None: the full grid. ``clock``:
    what times the fits and holds the limit (default: the wall clock on ``device``; tests give one that counts
    work, so what shrinks is the same on any CPU)."""
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
            if out and not clock.fits(clock.fit_seconds(len(A))):
                dropped += 1
                continue
            W = clock.timed(functools.partial(solve_spd, A, float(alpha), B), len(A))
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
                if out and not clock.fits(clock.fit_seconds(len(K))):
                    dropped += 1
                    continue
                c = clock.timed(functools.partial(solve_spd, K, alpha, Yb), len(K))
                consider({"head": "krr", "alpha": alpha, "gamma": g / scale_sq, "gamma_rel": g, "rows": len(K)},
                         Kv @ c, ClosedForm("krr", alpha, feats, c, Xb, gamma=g / scale_sq, mean=mean, std=std))
    if dropped:
        log(f"budget: {dropped} more closed-form fits would not fit in the {clock.limit:.1f}s: dropped")
    how = [f"ridge on the {'primal' if primal else 'dual'} {min(n, d)} x {min(n, d)} system"] if alphas else []
    how += [f"kernel ridge on {krr_rows} x {krr_rows}"] if krr_rows else []
    log(f"closed form: {len(out)} candidates fitted on train and scored on validation in {clock.elapsed():.1f}s "
        f"({', '.join(how)})")
    return out, best[1]


# =============================================================================================
# An MLP head, and the supervised fit through the core loop (the MLP head, ESM-2 fine-tuning)
# =============================================================================================

class MLPHead(nn.Module):
    def __init__(self, d_in: int, hidden: int, out: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Dropout(dropout), nn.Linear(d_in, hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def head_loss(pred: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    return F.mse_loss(pred.squeeze(1), y) if task == "regression" else F.cross_entropy(pred, y)


def target_scaling(data: ProteinData) -> tuple[float, float]:
    """(mean, std) of the training targets the networks regress on standardised; (0, 1) for classes."""
    train = data.split[0]
    return (float(data.y[train].mean()), float(data.y[train].std()) or 1.0) if data.task == "regression" \
        else (0.0, 1.0)


def unscaled(p: np.ndarray, mean: float, std: float, task: str) -> np.ndarray:
    return p * std + mean if task == "regression" else p


def train_supervised(cfg: HeadFields, run, data: ProteinData, model: nn.Module, inputs: torch.Tensor, batch: int,
                     optimizer: torch.optim.Optimizer, device, predict_fn) -> tuple[nn.Module, dict, np.ndarray]:
    """The core loop on (inputs, targets) rows, scored on validation only; returns the model at its best validation
    state, the loop's stats (with ``best_val_<metric>``) and the test rows' predictions as a thunk (for the end)."""
    train, val, test = data.split
    mean, std = target_scaling(data)
    y = torch.from_numpy((data.y - mean) / std).float() if data.task == "regression" else torch.from_numpy(data.y)
    batches = TensorBatches((inputs[train], y[train]), batch, seed=run.seed)
    metric, higher = primary_metric(data.task)
    best = BestState(higher)
    unscale = functools.partial(unscaled, mean=mean, std=std, task=data.task)

    def evaluate(m: nn.Module) -> dict[str, float]:
        val_metrics = score(data.y[val], unscale(predict_fn(m, inputs[val])), *SCORING[data.task])
        best.update(val_metrics[metric], m)
        return {f"val_{k}": v for k, v in val_metrics.items()}

    def loss_fn(m: nn.Module, b) -> torch.Tensor:
        x, t = b
        return head_loss(m(to_device(x, device)), to_device(t, device), data.task)

    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=0.0)
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr), settings=LoopSettings.of(cfg),
                 keep={"best": best})
    best.restore(model)
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    return model, stats, lambda: unscale(predict_fn(model, inputs[test]))


@torch.no_grad()
def predict_rows(model: nn.Module, x: torch.Tensor, device, batch: int = 1024) -> np.ndarray:
    model.eval()
    out = [model(x[i:i + batch].to(device)).float().cpu() for i in range(0, len(x), batch)]
    model.train()
    return torch.cat(out).numpy()


@dataclass
class MLPFit:
    """The MLP head at its best validation state; predicts rows from their raw features, as it was scored."""
    feats: Features
    model: MLPHead
    mean: float
    std: float
    task: str
    device: torch.device
    head = "mlp"

    def predict(self, X: np.ndarray) -> np.ndarray:
        return unscaled(predict_rows(self.model, self.feats(X).float(), self.device), self.mean, self.std, self.task)


def train_mlp_head(cfg: HeadFields, run, data: ProteinData, X: np.ndarray, scale: bool):
    """The MLP through the core loop on ``run``'s budget: (loop stats, the fitted head, description)."""
    device = choose_device(run.device)
    feats = Features.fit(X[data.split[0]], scale)
    inputs = feats(X).float()
    torch.manual_seed(run.seed)
    out = 1 if data.task == "regression" else len(data.classes)
    model = MLPHead(inputs.size(1), cfg.hidden, out, cfg.dropout).to(device)
    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), lr=cfg.lr or 1e-3)
    model, stats, _ = train_supervised(cfg, run, data, model, inputs, cfg.batch_size or 64, optimizer, device,
                                       functools.partial(predict_rows, device=device))
    fitted = MLPFit(feats, model, *target_scaling(data), data.task, device)
    return stats, fitted, f"mlp ({inputs.size(1)} -> {cfg.hidden} -> {out})"


def fit_head(cfg: HeadFields, run, data: ProteinData, X: np.ndarray,
             scale: bool) -> tuple[dict[str, float], ClosedForm | MLPFit, np.ndarray]:
    """Fit the configured head on features ``X`` (head=auto: ridge, kernel ridge and the MLP, the best on
    validation kept), then score it on test once: (metrics, the head kept, its test predictions). Under a seconds
    budget the closed-form grid gets the budget (head=auto: half, the MLP the rest) and shrinks to fit;
    ``train_seconds`` counts all fitting and selection."""
    train, _, test = data.split
    metric = primary_metric(data.task)[0]
    seconds = run.budget.amount if run.budget.kind == "seconds" else None
    options = []  # (validation value, description, test predictions as a thunk)
    closed_seconds = 0.0
    if cfg.head != "mlp":
        kinds = ["ridge", "krr"] if cfg.head == "auto" else [cfg.head]
        if cfg.head == "auto" and len(train) > KRR_MAX_ROWS:
            kinds = ["ridge"]
            run.log(f"{len(train)} training rows: kernel ridge skipped (O(n^3)); head=krr forces it")
        limit = None if seconds is None else seconds * (AUTO_CLOSED_SHARE if cfg.head == "auto" else 1.0)
        start = time.perf_counter()
        candidates, chosen = select_closed_form(data, X, scale, kinds, limit, run.log, closed_form_device(run))
        closed_seconds = time.perf_counter() - start
        best = max(candidates, key=lambda c: c["val"][metric])
        hp = ", ".join(f"{k} {best[k]:.3g}" for k in ("alpha", "gamma_rel") if k in best)
        hp += f", on {best['rows']} training rows" if best.get("rows", len(train)) < len(train) else ""
        run.log(f"closed form: {best['head']} ({hp}) has the best validation {metric}, {best['val'][metric]:.4f}, "
                f"of {len(candidates)} candidates")
        options.append((best["val"][metric], f"{best['head']} ({hp}, fitted on train)", chosen))
    stats: dict = {}
    if cfg.head in ("auto", "mlp"):
        part = run
        if seconds is not None and closed_seconds > 0:
            part = run.part(Budget("seconds", max(seconds - closed_seconds, 0.05 * seconds)), main=True)
            run.log(f"mlp head: the {part.budget.amount:.1f}s the closed form left of the {seconds:g}s budget")
        stats, fitted, what = train_mlp_head(cfg, part, data, X, scale)
        options.append((stats[f"best_val_{metric}"], f"{what}, the best validation state", fitted))
    value, what, head = max(options, key=lambda o: o[0])
    if len(options) > 1:
        run.log(f"head=auto keeps {what.split(' (')[0]}: validation {metric} {value:.4f} against "
                f"{min(options, key=lambda o: o[0])[0]:.4f}")
    run.report("head", f"{what}; validation {metric} {value:.4f}")
    chose_mlp = what.startswith("mlp")
    test_pred = head.predict(X[test])  # the test rows, scored once
    return {**final_metrics(data, value, test_pred),
            "train_seconds": closed_seconds + stats.get("train_seconds", 0.0),
            "params_M": stats.get("params_M") if chose_mlp else None,
            "peak_mem_mb": max(stats.get("peak_mem_mb", 0.0), peak_memory_mb(torch.device("cpu")))}, head, test_pred
