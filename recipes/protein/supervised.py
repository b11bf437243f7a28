"""The supervised fit through the core loop that the MLP head and ESM-2 fine-tuning share: an MLP head, targets
standardised on the training rows, validation scored at each evaluation and the best validation state kept; the
test rows predicted only at the end."""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import schedule
from recipe_zoo.core.batches import TensorBatches, to_device
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.metrics import score
from recipe_zoo.core.weights import BestState
from recipe_zoo.recipes.protein.config import HeadFields
from recipe_zoo.recipes.protein.scoring import SCORING, primary_metric
from recipe_zoo.recipes.protein.sequences import ProteinData


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
