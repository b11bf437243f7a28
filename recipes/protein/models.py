"""The heads on fixed features (protein/onehot, protein/esm-embed): ridge and RBF kernel ridge in closed form,
every candidate scored on validation and the chosen one refitted on train + validation; an MLP head through the
core loop; and the supervised fit through the core loop that protein/esm-finetune shares."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import optim, schedule
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.loop import BestState, LoopSettings, fit, peak_memory_mb
from recipe_zoo.core.metrics import score
from recipe_zoo.core.precision import choose_device
from recipe_zoo.recipes.protein.config import ProteinConfig
from recipe_zoo.recipes.protein.data import SCORING, ProteinData, primary_metric

# =============================================================================================
# Ridge and RBF kernel ridge in closed form
# =============================================================================================

RIDGE_ALPHAS = np.logspace(-2, 5, 22)
KRR_ALPHAS = (0.01, 0.03, 0.1, 0.3, 1.0)
KRR_GAMMAS = (0.25, 0.5, 1.0, 2.0, 4.0)  # x 1 / (median squared distance between training rows)
KRR_MAX_ROWS = 20000  # kernel ridge is O(n^3): past this, head=auto keeps to ridge


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


def rbf(A: torch.Tensor, B: torch.Tensor, gamma: float) -> torch.Tensor:
    return torch.exp(-gamma * torch.cdist(A, B).square())


def median_sq_distance(X: torch.Tensor, seed: int = 0) -> float:
    g = torch.Generator().manual_seed(seed)
    sample = X[torch.randperm(len(X), generator=g)[:1000]]
    d = torch.cdist(sample, sample).square()
    return float(d[d > 0].median()) if (d > 0).any() else 1.0


def select_closed_form(data: ProteinData, X: np.ndarray, scale: bool, kinds: list[str]) -> list[dict]:
    """Every (head, hyperparameter) candidate fitted on train, scored on validation."""
    train, val, _ = data.split
    feats = Features.fit(X[train], scale)
    Xt, Xv = feats(X[train]), feats(X[val])
    Y, mean, std = targets_matrix(data, train)
    out = []
    if "ridge" in kinds:
        U, s, Vh = torch.linalg.svd(Xt, full_matrices=False)
        UtY = U.T @ Y
        for alpha in RIDGE_ALPHAS:
            W = Vh.T @ ((s / (s ** 2 + alpha)).unsqueeze(1) * UtY)
            pred = (Xv @ W).numpy() * std + mean
            out.append({"head": "ridge", "alpha": float(alpha),
                        "val": score(data.y[val], pred, *SCORING[data.task])})
    if "krr" in kinds:
        scale_sq = median_sq_distance(Xt)
        for g in KRR_GAMMAS:
            Kt, Kv = rbf(Xt, Xt, g / scale_sq), rbf(Xv, Xt, g / scale_sq)
            for alpha in KRR_ALPHAS:
                L = torch.linalg.cholesky(Kt + alpha * torch.eye(len(Kt), dtype=Kt.dtype))
                pred = (Kv @ torch.cholesky_solve(Y, L)).numpy() * std + mean
                out.append({"head": "krr", "alpha": alpha, "gamma": g / scale_sq, "gamma_rel": g,
                            "val": score(data.y[val], pred, *SCORING[data.task])})
    return out


def refit_closed_form(data: ProteinData, X: np.ndarray, scale: bool, choice: dict) -> np.ndarray:
    """The chosen head refitted on train + validation; predictions for the test rows."""
    train, val, test = data.split
    fit_idx = np.concatenate([train, val])
    feats = Features.fit(X[fit_idx], scale)
    Xf, Xs = feats(X[fit_idx]), feats(X[test])
    Y, mean, std = targets_matrix(data, fit_idx)
    if choice["head"] == "ridge":
        A = Xf.T @ Xf if Xf.shape[1] <= Xf.shape[0] else None  # primal when features are fewer, else dual
        if A is not None:
            W = torch.linalg.solve(A + choice["alpha"] * torch.eye(len(A), dtype=A.dtype), Xf.T @ Y)
            pred = Xs @ W
        else:
            G = Xf @ Xf.T
            pred = (Xs @ Xf.T) @ torch.linalg.solve(G + choice["alpha"] * torch.eye(len(G), dtype=G.dtype), Y)
    else:
        gamma = choice["gamma_rel"] / median_sq_distance(Xf)
        L = torch.linalg.cholesky(rbf(Xf, Xf, gamma) + choice["alpha"] * torch.eye(len(Xf), dtype=Xf.dtype))
        pred = rbf(Xs, Xf, gamma) @ torch.cholesky_solve(Y, L)
    return pred.numpy() * std + mean


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


def train_supervised(cfg: ProteinConfig, run, data: ProteinData, model: nn.Module, inputs: torch.Tensor, batch: int,
                     optimizer: torch.optim.Optimizer, device, predict_fn) -> tuple[np.ndarray, dict]:
    """The core loop on (inputs, targets) rows; the best validation state predicts the test rows."""
    train, val, test = data.split
    mean, std = (float(data.y[train].mean()), float(data.y[train].std()) or 1.0) if data.task == "regression" \
        else (0.0, 1.0)
    y = torch.from_numpy((data.y - mean) / std).float() if data.task == "regression" else torch.from_numpy(data.y)
    batches = TensorBatches((inputs[train], y[train]), batch, seed=run.seed)
    metric, higher = primary_metric(data.task)
    best = BestState(higher)

    def unscale(p: np.ndarray) -> np.ndarray:
        return p * std + mean if data.task == "regression" else p

    def evaluate(m: nn.Module) -> dict[str, float]:
        val_metrics = score(data.y[val], unscale(predict_fn(m, inputs[val])), *SCORING[data.task])
        best.update(val_metrics[metric], m)
        return {f"val_{k}": v for k, v in val_metrics.items()}

    def loss_fn(m: nn.Module, b) -> torch.Tensor:
        x, t = b
        return head_loss(m(x.to(device, non_blocking=True)), t.to(device, non_blocking=True), data.task)

    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=0.0)
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr), settings=LoopSettings.of(cfg),
                 keep={"best": best})
    best.restore(model)
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    return unscale(predict_fn(model, inputs[test])), stats


@torch.no_grad()
def predict_rows(model: nn.Module, x: torch.Tensor, device, batch: int = 1024) -> np.ndarray:
    model.eval()
    out = [model(x[i:i + batch].to(device)).float().cpu() for i in range(0, len(x), batch)]
    model.train()
    return torch.cat(out).numpy()


def train_mlp_head(cfg: ProteinConfig, run, data: ProteinData, X: np.ndarray, scale: bool):
    """The MLP through the core loop on the run's budget: (test predictions, loop stats, description)."""
    device = choose_device(run.device)
    inputs = Features.fit(X[data.split[0]], scale)(X).float()
    torch.manual_seed(run.seed)
    out = 1 if data.task == "regression" else len(data.classes)
    model = MLPHead(inputs.size(1), cfg.hidden, out, cfg.dropout).to(device)
    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), lr=cfg.lr or 1e-3)
    pred, stats = train_supervised(cfg, run, data, model, inputs, cfg.batch_size or 64, optimizer, device,
                                   functools.partial(predict_rows, device=device))
    return pred, stats, f"mlp ({inputs.size(1)} -> {cfg.hidden} -> {out})"


def fit_head(cfg: ProteinConfig, run, data: ProteinData, X: np.ndarray, scale: bool) -> dict[str, float]:
    """Fit the configured head on features ``X`` (head=auto: ridge, kernel ridge and the MLP, the best on
    validation kept); returns the test metrics and the run's figures."""
    train, _, test = data.split
    metric = primary_metric(data.task)[0]
    start = time.perf_counter()
    options = []  # (validation value, description, test predictions as a thunk)
    if cfg.head != "mlp":
        kinds = ["ridge", "krr"] if cfg.head == "auto" else [cfg.head]
        if cfg.head == "auto" and len(train) > KRR_MAX_ROWS:
            kinds = ["ridge"]
            run.log(f"{len(train)} training rows: kernel ridge skipped (O(n^3)); head=krr forces it")
        candidates = select_closed_form(data, X, scale, kinds)
        best = max(candidates, key=lambda c: c["val"][metric])
        hp = ", ".join(f"{k} {best[k]:.3g}" for k in ("alpha", "gamma_rel") if k in best)
        run.log(f"closed form: {best['head']} ({hp}) has the best validation {metric}, {best['val'][metric]:.4f}, "
                f"of {len(candidates)} candidates")
        options.append((best["val"][metric], f"{best['head']} ({hp}, refitted on train + validation)",
                        functools.partial(refit_closed_form, data, X, scale, best)))
    stats = {}
    if cfg.head in ("auto", "mlp"):
        pred, stats, what = train_mlp_head(cfg, run, data, X, scale)
        options.append((stats[f"best_val_{metric}"], f"{what}, the best validation state", lambda: pred))
    value, what, predict = max(options, key=lambda o: o[0])
    if len(options) > 1:
        run.log(f"head=auto keeps {what.split(' (')[0]}: validation {metric} {value:.4f} against "
                f"{min(options, key=lambda o: o[0])[0]:.4f}")
    run.report("head", f"{what}; validation {metric} {value:.4f}")
    test_metrics = score(data.y[test], predict(), *SCORING[data.task])
    chose_mlp = what.startswith("mlp")
    return {**{f"test_{k}": v for k, v in test_metrics.items()}, f"val_{metric}": value,
            "train_seconds": time.perf_counter() - start, "params_M": stats.get("params_M") if chose_mlp else None,
            "peak_mem_mb": max(stats.get("peak_mem_mb", 0.0), peak_memory_mb(torch.device("cpu")))}

