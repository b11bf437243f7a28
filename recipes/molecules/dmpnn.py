"""``molecules/dmpnn``: a directed message-passing network over bonds (chemprop's D-MPNN, Yang et al. 2019)
in plain torch. Targets standardised on the training rows, RDKit descriptors concatenated to the readout,
AdamW with warmup and cosine decay through the core loop, a masked loss for multi-task gaps, the best
validation checkpoint kept; k-fold and ensembles average the models' predictions. The test molecules are
predicted only once a split's models are final, and scored once all are.
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
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import BestState, LoopSettings, fit
from recipe_zoo.core.metrics import score_tasks
from recipe_zoo.core.precision import choose_device
from recipe_zoo.recipes.molecules import data, models
from recipe_zoo.recipes.molecules.config import DMPNNConfig
from recipe_zoo.recipes.molecules.data import Graphs, MolTable

# =============================================================================================
# Loss and scaling: missing targets masked, targets and descriptors standardised on the training rows
# =============================================================================================

def masked_loss(pred: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    mask = ~torch.isnan(y)
    target = torch.nan_to_num(y)
    if task == "classification":
        loss = F.binary_cross_entropy_with_logits(pred, target, reduction="none")
    else:
        loss = F.mse_loss(pred, target, reduction="none")
    return (loss * mask).sum() / mask.sum().clamp(min=1)


def standardizer(values: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std over the training rows (NaN-aware), std 1 where a column is constant or empty."""
    mean = np.nan_to_num(np.nanmean(values[idx], axis=0))
    std = np.nan_to_num(np.nanstd(values[idx], axis=0), nan=1.0)
    std[std < 1e-8] = 1.0
    return mean, std


# =============================================================================================
# One model on one split: AdamW, warmup + cosine, the core loop, the best validation checkpoint
# =============================================================================================

def train_dmpnn_split(cfg: DMPNNConfig, run, table: MolTable, graphs: Graphs, desc, train_idx: np.ndarray,
                      val_idx: np.ndarray, budget: Budget, device, member_seed: int, label: str) -> tuple:
    """One model trained on ``train_idx``, its best validation state kept: returns (predict, stats), where
    ``predict(rows)`` gives the restored model's predictions on the original scale."""
    task = table.task
    y = table.y.copy()
    if task == "regression":
        y_mean, y_std = standardizer(y, train_idx)
        y = (y - y_mean) / y_std
    extra = None
    if desc is not None:
        d_mean, d_std = standardizer(desc, train_idx)
        extra = torch.from_numpy(np.clip(np.nan_to_num((desc - d_mean) / d_std), -10, 10).astype(np.float32))
    torch.manual_seed(member_seed)
    model = models.DMPNN(graphs.x.size(1), graphs.edge_attr.size(1), 0 if extra is None else extra.size(1),
                  y.shape[1], cfg).to(device)
    targets = torch.from_numpy(y).float()
    # Batches of molecule indices (the shared batcher keeps resume exact), each collated into one graph.
    batches = TensorBatches((torch.as_tensor(train_idx),), cfg.batch_size, seed=member_seed,
                            transform=lambda batch, g: (models.collate(graphs, batch[0], extra), targets[batch[0]]))
    groups = optim.decay_groups(model, cfg.weight_decay)
    optimizer = optim.adamw(groups, lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8)
    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=cfg.lr_final, start=0.1)
    metric, higher = data.primary_metric(task)
    best = BestState(higher)

    def unscale(p: np.ndarray) -> np.ndarray:
        return p * y_std + y_mean if task == "regression" else p

    def evaluate(m: nn.Module) -> dict[str, float]:
        pred = unscale(models.predict(m, graphs, val_idx, extra, device, task))
        val = score_tasks(table.y[val_idx], pred, data.SCORE_TASK[task], data.METRIC_NAMES[task])
        value = val.get(metric, float("nan"))
        best.update(value, m)
        return {f"val_{k}": v for k, v in val.items()}

    def loss_fn(m: nn.Module, batch) -> torch.Tensor:
        b, target = batch
        return masked_loss(m(b.to(device)), target.to(device), task)

    settings = LoopSettings.of(cfg)
    result = fit(model, optimizer, batches, loss_fn, run.part(budget, main=label == ""), device=device,
                 evaluate=evaluate, update_hparams=functools.partial(schedule.apply_schedules, lr=lr),
                 settings=settings, keep={"best": best})
    best.restore(model)  # the best validation checkpoint, as chemprop keeps
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    return lambda rows: unscale(models.predict(model, graphs, rows, extra, device, task)), stats


# =============================================================================================
# The recipe: each split (or fold), each ensemble member, their test predictions averaged
# =============================================================================================

@recipe("molecules/dmpnn", config=DMPNNConfig, benchmark="esol", metric="test_rmse", higher_is_better=False,
        budget="30s", summary="directed message passing over bonds (chemprop's D-MPNN) in plain torch; random or "
                              "scaffold splits, k-fold, ensembles; RMSE or ROC-AUC")
def train_dmpnn(cfg: DMPNNConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    table = data.load_for(cfg, run)
    graphs = data.cached("graphs", table, lambda: data.featurize(table.mols))
    desc = data.cached("descriptors", table, lambda: data.rdkit_descriptors(table.mols)) if cfg.descriptors else None
    if cfg.ensemble < 1:
        raise ZooError(f"ensemble={cfg.ensemble}: must be at least 1")
    splits = data.splits_for(cfg, table, run)
    data.inspect_split(run, table, splits[0], loop=True)
    per_model = Budget(run.budget.kind, run.budget.amount / (cfg.ensemble * len(splits)))
    predicted, total_seconds, last = [], 0.0, {}
    for k, (train_idx, val_idx, test_idx) in enumerate(splits):
        members = []
        for member in range(cfg.ensemble):
            label = "" if k == 0 and member == 0 else f"fold {k} model {member}"
            predict, stats = train_dmpnn_split(cfg, run, table, graphs, desc, train_idx, val_idx, per_model, device,
                                               member_seed=run.seed * 1000 + member, label=label)
            members.append(predict)
            total_seconds += stats["train_seconds"]
            last = stats
        # This split's models are final: the ensemble's mean predictions, scored with the others at the end.
        predicted.append((val_idx, np.mean([p(val_idx) for p in members], axis=0),
                          test_idx, np.mean([p(test_idx) for p in members], axis=0)))
    metrics = data.finish(run, table, predicted)
    return {**metrics, "train_seconds": total_seconds, "params_M": last["params_M"],
            "peak_mem_mb": last["peak_mem_mb"], "mfu_percent": last["mfu_percent"], "molecules": len(table.mols)}
