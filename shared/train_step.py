"""One optimizer step of the core loop, and the parts it is made of.

``train_step``: ``accum_steps`` micro-batches, each loss divided by their number before backward, under autocast
and the gradient scaler; clipping; the optimizer step. ``optimizer_step`` wraps it for ``fit``: the FLOPs of the
run's first step, an out-of-memory error named with the micro-batch, and the weight averages (EMA, lookahead)
updated after it. ``prepare_step`` makes the parts once per ``fit``: joined processes, precision, scaler, the
averages' copies and the module that trains (DDP-wrapped, compiled).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn

from recipe_zoo.core import distributed, profiling
from recipe_zoo.core.flops import counting_flops
from recipe_zoo.core.precision import (autocast, enable_activation_checkpointing, grad_scaler, maybe_compile,
                                       resolve_precision)
from recipe_zoo.core.training_errors import OutOfMemory, is_out_of_memory
from recipe_zoo.core.weights import EMA


@dataclass
class StepParts:
    """What a step uses beside the loss: the model and the module that trains it, its optimizer and batches,
    the ``LoopSettings``, the precision and its gradient scaler, and the averages of the weights."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    batches: object
    settings: object  # the loop's LoopSettings
    device: torch.device
    world: int
    fsdp: bool
    precision: str
    scaler: object
    ema: EMA | None
    slow: EMA | None  # lookahead in airbench's form: the slow weights are an EMA the fast weights are reset to
    params: list[nn.Parameter] = field(default_factory=list)  # those that train now
    train_model: nn.Module | None = None  # the model DDP-wrapped and compiled, as the settings ask

    def trainable(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def wrap(self) -> nn.Module:  # DDP syncs the parameters that train when it is built: rebuilt when they change
        wrapped = distributed.wrap_ddp(self.model, self.device) if self.world > 1 and not self.fsdp else self.model
        return maybe_compile(wrapped, self.settings.compile)

    def follow_trainable(self) -> None:
        """After a recipe's ``on_step``: if the parameters that train changed (layers unfrozen), wrap again."""
        now = self.trainable()
        if len(now) != len(self.params) or any(p is not q for p, q in zip(now, self.params)):
            self.params, self.train_model = now, self.wrap()

    @property
    def eval_model(self) -> nn.Module:
        """The weights evaluations and the result use: the EMA's when EMA is on."""
        return self.ema.module if self.ema is not None else self.model


def prepare_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches, device: torch.device, s,
                 log) -> StepParts:
    """The step's parts for ``fit`` under the ``LoopSettings`` ``s``; under N processes, first joins them
    (shards, one starting point, per-rank seeds, the LR rule)."""
    world = distributed.world_size()
    fsdp = distributed.fsdp_sharded(model)
    if fsdp and (s.ema_decay > 0 or s.lookahead > 0):
        raise ValueError("EMA and lookahead keep a full copy of the weights: turn them off under FSDP")
    if world > 1:
        distributed.join_processes(model, optimizer, batches, device, fsdp, s.sync_batchnorm, s.lr_scaling, log)
    precision = resolve_precision(device, s.precision)
    scaler = grad_scaler(device, precision)
    ema = EMA(model, s.ema_decay) if s.ema_decay > 0 else None
    slow = EMA(model, s.lookahead) if s.lookahead > 0 else None
    if s.activation_checkpointing:  # after the EMA copy: the copy must keep plain forwards
        enable_activation_checkpointing(model)
    parts = StepParts(model, optimizer, batches, s, device, world, fsdp, precision, scaler, ema, slow)
    parts.params = parts.trainable()
    parts.train_model = parts.wrap()
    return parts


def optimizer_step(parts: StepParts, loss_fn, counters, progress: float) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """One optimizer step with the EMA and lookahead updates: (loss on the device, grad norm, whether FLOPs were
    counted). ``counters``: the loop's ``Counters`` (its step, and the FLOPs per step once counted).

    FLOPs are counted once, on the run's first step (which is then not timed). The counter runs the ops under a
    dispatch mode, which can round differently: a resumed run reuses the saved count."""
    s, model = parts.settings, parts.model
    counting = counters.flops_per_step < 0
    try:
        with counting_flops() if counting else contextlib.nullcontext() as counter:
            loss, grad_norm = train_step(parts.train_model, parts.optimizer, parts.batches, loss_fn, s, parts.scaler,
                                         parts.params, parts.device, parts.precision)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        raise OutOfMemory(counters.step, parts.batches.batch_size, s.accum_steps, parts.device, parts.precision,
                          hasattr(model, "blocks"), str(exc),
                          recoverable=isinstance(exc, torch.OutOfMemoryError)) from None
    if counting:
        counters.flops_per_step = float(counter.get_total_flops())
    if parts.slow is not None and (counters.step + 1) % 5 == 0:
        parts.slow.update(model, decay=s.lookahead ** 5 * progress ** 3)
        parts.slow.copy_to(model)
    if parts.ema is not None:
        parts.ema.update(model)
    return loss, grad_norm, counting


def train_step(model, optimizer, batches, loss_fn, s, scaler, params, device, precision):
    """(mean loss of the micro-batches on the device, grad norm before clipping); ``s``: the ``LoopSettings``
    (``accum_steps``, ``clip_grad``)."""
    total = torch.zeros((), device=device)
    for i in range(s.accum_steps):
        with profiling.section("zoo::batch"):
            batch = batches.next_batch()
        # all-reduce once, on the last micro-batch
        with profiling.section("zoo::forward_backward"), distributed.gradient_sync(model, i == s.accum_steps - 1):
            with autocast(device, precision):
                loss = loss_fn(model, batch)
            scaler.scale(loss / s.accum_steps).backward()
        total += loss.detach().float()
    with profiling.section("zoo::clip"):
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, s.clip_grad if s.clip_grad > 0 else float("inf"))
    with profiling.section("zoo::optimizer"):
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return total / s.accum_steps, distributed.local_value(grad_norm)
