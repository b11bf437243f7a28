"""``tabular/mlp``: a neural network for large tables through the core loop. An MLP over standardised numbers
and categorical embeddings (or ``model=ft-transformer``), trained with AdamW on a cosine schedule; the best
validation state is kept (early stopping) and scores the test rows once training ends.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import optim, schedule
from recipe_zoo.core.api import recipe
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.loop import BestState, LoopSettings, fit
from recipe_zoo.core.precision import choose_device
from recipe_zoo.recipes.tabular import data, models
from recipe_zoo.recipes.tabular.config import MLPConfig
from recipe_zoo.recipes.tabular.data import Table

# =============================================================================================
# One network on one split: encoding, model, AdamW + warmup-cosine, the core loop, the best validation state
# =============================================================================================

def fit_nn(cfg: MLPConfig, run, table: Table, X, fit_rows: np.ndarray, val: np.ndarray, budget,
           label: str = "") -> tuple:
    """Train on ``fit_rows``, evaluate on ``val`` (the best validation state is kept) and return (predict, stats):
    ``predict(rows)`` gives the restored best model's predictions."""
    device = choose_device(run.device)
    enc = models.encode_for_nn(X, fit_rows, cfg.quantile, run.seed)
    log = data.use_log(table, fit_rows, cfg)[-1]  # the network takes the log when the target is positive and skewed
    metric, higher = data.primary_metric(table.task)
    if table.task == "regression":
        t = np.log1p(table.y) if log else table.y
        mean, std = float(t[fit_rows].mean()), float(t[fit_rows].std()) or 1.0
        target = torch.from_numpy((t - mean) / std).float()
        out = 1
    else:
        target = torch.tensor(table.y)  # a copy: zoo doctor hands in a read-only array
        out = 1 if table.task == "binary" else len(table.classes)

    def to_pred(raw: np.ndarray) -> np.ndarray:
        if table.task == "regression":
            v = raw[:, 0] * std + mean
            return np.expm1(v) if log else v
        if table.task == "binary":
            return 1 / (1 + np.exp(-raw[:, 0]))
        e = np.exp(raw - raw.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    torch.manual_seed(run.seed)
    if cfg.model == "mlp":
        model = models.TabularMLP(enc.num.size(1), enc.cardinalities, out, cfg.hidden, cfg.layers, cfg.dropout)
    else:
        model = models.FTTransformer(enc.num.size(1), enc.cardinalities, out, max(8, cfg.hidden // 4), cfg.layers,
                                     cfg.dropout)
    model = model.to(device)
    weights = data.sample_weights(table, np.arange(len(table.y)), cfg)
    w = torch.from_numpy(weights).float() if weights is not None else torch.ones(len(table.y))
    rows = torch.as_tensor(fit_rows)
    batches = TensorBatches((enc.num[rows], enc.cat[rows], target[rows], w[rows]), cfg.batch_size, seed=run.seed)
    best = BestState(higher)

    def evaluate(m: nn.Module) -> dict[str, float]:
        values = data.scores(table, val, to_pred(models.nn_predict(m, enc, val, device)))
        best.update(values[metric], m)
        return {f"val_{k}": v for k, v in values.items()}

    def loss_fn(m: nn.Module, b) -> torch.Tensor:
        num, cat, y, weight = (t.to(device, non_blocking=True) for t in b)
        raw = m(num, cat)
        if table.task == "regression":
            loss = F.mse_loss(raw[:, 0], y, reduction="none")
        elif table.task == "binary":
            loss = F.binary_cross_entropy_with_logits(raw[:, 0], y.float(), reduction="none")
        else:
            loss = F.cross_entropy(raw, y, reduction="none")
        return (loss * weight).sum() / weight.sum()

    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), lr=cfg.lr)
    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=0.0)
    result = fit(model, optimizer, batches, loss_fn, run.part(budget, main=not label), device=device,
                 evaluate=evaluate, update_hparams=functools.partial(schedule.apply_schedules, lr=lr),
                 settings=LoopSettings.of(cfg), keep={"best": best})
    best.restore(model)
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    stats["log_target"] = log
    return lambda rows: to_pred(models.nn_predict(model, enc, rows, device)), stats


# =============================================================================================
# The recipe
# =============================================================================================

@recipe("tabular/mlp", config=MLPConfig, benchmark="california-housing", metric="test_rmse",
        higher_is_better=False, budget="1m",
        summary="an MLP (or model=ft-transformer) over standardised numbers and categorical embeddings through "
                "the core loop; for large tables")
def train_mlp(cfg: MLPConfig, run) -> dict[str, float]:
    from recipe_zoo.core.budget import Budget

    table, views = data.prepare(cfg, run)
    data.inspect_split(run, table, views, loop=True)
    budget = Budget(run.budget.kind, run.budget.amount / len(views)) if run.budget.kind == "seconds" else run.budget
    metrics, stats, total = data.over_splits(run, table, views, lambda k, X, train, val: fit_nn(
        cfg, run, table, X, train, val, budget, f"fold {k}" if k else ""))
    metric = data.primary_metric(table.task)[0]
    run.report("network", f"{cfg.model}, {'quantile' if cfg.quantile else 'z-score'} numbers"
                          f"{', log target' if stats['log_target'] else ''}; best validation {metric} "
                          f"{stats[f'best_val_{metric}']:.4f}")
    return {**metrics, "train_seconds": total, "params_M": stats["params_M"],
            "peak_mem_mb": stats["peak_mem_mb"], "mfu_percent": stats.get("mfu_percent"), "rows": len(table.y)}
