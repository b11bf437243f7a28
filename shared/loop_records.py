"""What the core loop records as it trains: an evaluation at each ``eval_every`` mark (on the EMA weights when
EMA is on) as a row of ``metrics.csv``, the training loss every 1% of the budget as a row of ``train.csv``, and a
progress line in the log every ``log_every`` seconds."""
from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn

from recipe_zoo.core import distributed
from recipe_zoo.core.loop_state import TRAIN_LOG_EVERY, Counters, LoopState
from recipe_zoo.core.precision import autocast
from recipe_zoo.core.train_step import StepParts


def record_eval(t: LoopState, progress: float, evaluate: Callable[[nn.Module], dict[str, float]]) -> None:
    """The evaluation due at ``progress``: its row, with the mean training loss since the last one."""
    c = t.counters
    t.metrics = evaluate_model(t.parts, evaluate)
    row = eval_row(c, progress, t.steps_per_epoch, t.parts.optimizer, t.grad_norm, t.metrics)
    while t.eval_due(progress):  # marks passed together (a large step) make one row
        c.next_eval += 1
    c.window_loss, c.window_steps = 0.0, 0
    t.run.record_eval(row)


def record_train_if_due(t: LoopState) -> None:
    """A train row at each TRAIN_LOG_EVERY of progress, with the mean loss of the steps read since the last."""
    c = t.counters
    progress = t.progress()
    if progress >= c.next_train_log * TRAIN_LOG_EVERY - 1e-12:
        row = train_row(c, progress, t.steps_per_epoch, t.parts.optimizer, t.grad_norm)
        while progress >= c.next_train_log * TRAIN_LOG_EVERY - 1e-12:
            c.next_train_log += 1
        t.run.record_train(row)


def log_progress_if_due(t: LoopState) -> None:
    """The progress line every ``log_every`` seconds, once the open window's losses are read."""
    c = t.counters
    if time.time() - t.last_log > t.s.log_every and not t.window.losses:
        t.last_log = time.time()
        rate = t.global_batch * t.timing.steps / max(t.timing.seconds, 1e-9)
        t.log(f"step {c.step} | {100 * t.progress():5.1f}% | loss {c.last_loss:.4f} | "
              f"lr x{t.lr_mult:.3f} | {rate:.0f} samples/s | {c.train_seconds:.1f}s")


def evaluate_model(parts: StepParts, evaluate: Callable[[nn.Module], dict[str, float]]) -> dict[str, float]:
    """Every rank evaluates (under FSDP the forwards are collective); the ranks' batch-norm buffers are made
    rank 0's first, and rank 0's numbers are the ones every rank goes on with."""
    target = parts.eval_model
    if not parts.fsdp:
        distributed.broadcast_buffers(target)
    was_training = target.training
    target.eval()
    with torch.no_grad(), autocast(parts.device, parts.precision):
        metrics = evaluate(target)
    target.train(was_training)
    return distributed.broadcast_object({k: float(v) for k, v in metrics.items()})


def eval_row(c: Counters, progress, steps_per_epoch, optimizer, grad_norm, metrics) -> dict:
    train_loss = c.window_loss / c.window_steps if c.window_steps else float("nan")
    return {"step": c.step, "epoch": round(c.step / steps_per_epoch, 4), "progress": round(progress, 4),
            "train_seconds": round(c.train_seconds, 3), "train_loss": train_loss, "lr": optimizer.param_groups[0]["lr"],
            "grad_norm": float(grad_norm), **metrics}


def train_row(c: Counters, progress, steps_per_epoch, optimizer, grad_norm) -> dict:
    row = {"step": c.step, "epoch": round(c.step / steps_per_epoch, 4), "progress": round(progress, 4),
           "train_seconds": round(c.train_seconds, 3),
           "train_loss": c.train_window_loss / max(1, c.train_window_steps),
           "lr": optimizer.param_groups[0]["lr"], "grad_norm": float(grad_norm)}
    c.train_window_loss, c.train_window_steps = 0.0, 0
    return row
