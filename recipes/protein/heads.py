"""The head on fixed features (protein/onehot, protein/esm-embed): ridge and kernel ridge in closed form
(``closed_form.py``) and an MLP through the core loop, each chosen on validation (head=auto: the best of them), then
the test rows scored once."""
from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass

import numpy as np
import torch

from recipe_zoo.core import optim
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.loop import peak_memory_mb
from recipe_zoo.core.precision import choose_device
from recipe_zoo.recipes.protein.closed_form import (KRR_MAX_ROWS, ClosedForm, Features, closed_form_device,
                                                    select_closed_form)
from recipe_zoo.recipes.protein.config import HeadFields, head_dropout, head_target
from recipe_zoo.recipes.protein.ranks import RankedHead, RankMap
from recipe_zoo.recipes.protein.scoring import final_metrics, primary_metric
from recipe_zoo.recipes.protein.sequences import ProteinData
from recipe_zoo.recipes.protein.supervised import MLPHead, predict_rows, target_scaling, train_supervised, unscaled


AUTO_CLOSED_SHARE = 0.5  # head=auto under a seconds budget: the closed-form grid's share; the MLP gets the rest


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
    dropout = head_dropout(cfg)
    if cfg.dropout < 0:
        run.log(f"mlp head: dropout {dropout:g} (dropout=-1, split={getattr(cfg, 'split', '') or 'random'})")
    model = MLPHead(inputs.size(1), cfg.hidden, out, dropout).to(device)
    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), lr=cfg.lr or 1e-3)
    model, stats, _ = train_supervised(cfg, run, data, model, inputs, cfg.batch_size or 64, optimizer, device,
                                       functools.partial(predict_rows, device=device))
    fitted = MLPFit(feats, model, *target_scaling(data), data.task, device)
    return stats, fitted, f"mlp ({inputs.size(1)} -> {cfg.hidden} -> {out})"


def fit_head(cfg: HeadFields, run, data: ProteinData, X: np.ndarray,
             scale: bool) -> tuple[dict[str, float], ClosedForm | MLPFit | RankedHead, np.ndarray]:
    """Fit the configured head on features ``X`` (head=auto: ridge, kernel ridge and the MLP, the best on
    validation kept), then score it on test once: (metrics, the head kept, its test predictions). Under a seconds
    budget the closed-form grid gets the budget (head=auto: half, the MLP the rest) and shrinks to fit;
    ``train_seconds`` counts all fitting and selection. With ``target_scale=rank`` every head fits the training targets'
    Gaussian ranks and the head kept predicts through the map back."""
    train, _, test = data.split
    metric = primary_metric(data.task)[0]
    seconds = run.budget.amount if run.budget.kind == "seconds" else None
    ranks, scored = None, data
    if head_target(cfg, data.task) == "rank":  # every head fits Gaussian ranks; validation's order is unchanged
        ranks = RankMap.fit(data.y[train])
        data = dataclasses.replace(data, y=ranks.forward(data.y))
        run.log(f"target_scale=rank: the heads fit the Gaussian ranks of the {len(train)} training targets")
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
    if ranks is not None:
        head = RankedHead(head, ranks)  # predicts in the targets' units
    test_pred = head.predict(X[test])  # the test rows, scored once
    speed = {k: stats[k] for k in ("samples_per_s", "mfu_percent") if stats.get(k) is not None}  # the MLP's steps
    return {**final_metrics(scored, value, test_pred), **speed,
            "train_seconds": closed_seconds + stats.get("train_seconds", 0.0),
            "params_M": stats.get("params_M") if chose_mlp else None,
            "peak_mem_mb": max(stats.get("peak_mem_mb", 0.0), peak_memory_mb(torch.device("cpu")))}, head, test_pred
