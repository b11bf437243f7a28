"""The one training loop every torch recipe shares.

Budget in seconds, steps or epochs (time excludes evaluation, checkpointing and the steps the zoo measures
with: FLOP counting, profile tracing; compiling steps count); gradient accumulation with the loss divided by the
number of micro-steps; clipping; divergence fast-fail; GC frozen after the first step; periodic and final
evaluation (on EMA weights when EMA is on); atomic checkpoints and exact resume; throughput, MFU and peak memory.

``fit`` reads as the loop it runs; its parts live by job: the optimizer step (``train_step``), the loop's state
between steps and its checkpoint (``loop_state``), the rows and log lines it records (``loop_records``), and how a
run ends early (``training_errors``).
"""
from __future__ import annotations

import math
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Annotated, ClassVar, Literal

import torch
from torch import nn

from recipe_zoo.core.api import Count, Fraction, NonNegative, NonNegativeInt, Range, Run, Unit
from recipe_zoo.core.flops import peak_label
from recipe_zoo.core.loop_records import log_progress_if_due, record_eval, record_train_if_due
from recipe_zoo.core.loop_state import Counters, LoopState, resume
from recipe_zoo.core.train_step import optimizer_step, prepare_step


# compile=none (auto): torch.compile only for a fit given at least this many seconds of time budget, where the warm
# speed-up pays a cold compile back (the first run on a machine, after a torch upgrade or a cleaned /tmp):
# docs/LOG.md#2026-12-04-compile-auto-from-5-minutes
COMPILE_AUTO_SECONDS = 300.0


def resolve_compile(value: bool | None, budget) -> bool:
    """``compile``'s value, with none (auto) resolved for a fit under ``budget``: compiled under a time budget of at
    least ``COMPILE_AUTO_SECONDS``, eager under a shorter one and under step or epoch budgets."""
    if value is not None:
        return value
    return budget.kind == "seconds" and budget.amount >= COMPILE_AUTO_SECONDS


@dataclass
class LoopSettings:
    # What a device would choose when left at its default (``precision=auto``; TF32 on GPUs): a reference run
    # (``zoo/references.py``) sets each, so that every machine trains the same configuration. Recipes whose sizing
    # rules read the device add their shape and batch fields.
    DEVICE_FIELDS: ClassVar[tuple[str, ...]] = ("precision", "tf32")
    accum_steps: Count = 1  # micro-batches per optimizer step
    clip_grad: NonNegative = 0.0  # max global grad norm (0 = no clipping)
    ema_decay: Fraction = 0.0  # EMA of weights used for evaluation (0 = off)
    lookahead: Fraction = 0.0  # every 5 steps pull the weights to their EMA, decay this^5 x progress^3 (0 = off)
    eval_every: Unit = 0.25  # fraction of the budget between evaluations (0 = only at the end)
    epoch_cap: NonNegative = 0.0  # time budgets: training also ends after this many epochs, schedule too (0 = none)
    checkpoint_every: NonNegative = 120.0  # seconds of wall time between checkpoints
    diverge_factor: Annotated[float, Range(1, low_open=True)] = 10.0  # diverged when loss > this x first, or NaN/inf
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: GPU bf16 (else fp16), CPU as zoo show says
    compile: bool = False  # torch.compile the model for training
    tf32: bool = True  # fp32 matmuls in TF32 on GPUs (oneDNN's reduced fp32 math on CPUs); off: full fp32 everywhere
    activation_checkpointing: bool = False  # recompute each block in backward (models exposing .blocks)
    log_every: NonNegative = 10.0  # seconds of wall time between progress lines (0 = every step)
    sync_every: NonNegativeInt = 0  # steps between reads of the loss off the device (0 = 1 on CPU, 16 on GPUs)
    profile: NonNegativeInt = 0  # steps traced by torch.profiler after the compiling ones, not in the throughput
    lr_scaling: Literal["none", "sqrt", "linear"] = "none"  # under N processes: LR x sqrt N (the batch rule), x N
    sync_batchnorm: bool = True  # under N GPU processes, batch-norm statistics over the global batch

    @classmethod
    def of(cls, cfg) -> LoopSettings:
        """The loop's own fields out of a recipe config that extends LoopSettings."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})


@dataclass
class FitResult:
    steps: int
    epochs: float
    train_seconds: float
    samples: int
    params_M: float
    flops_per_step: float
    mfu_percent: float
    peak_mem_mb: float
    final_train_loss: float
    metrics: dict[str, float] = field(default_factory=dict)
    eval_model: nn.Module | None = None
    global_batch: int = 0  # per-device micro-batch x accumulation steps x processes
    processes: int = 1
    samples_per_s: float = math.nan  # over the timed steps only (not compiling, FLOP-counting or traced ones)

    def stats(self) -> dict[str, float]:
        return {"train_seconds": self.train_seconds, "steps": self.steps, "epochs": self.epochs,
                "samples_per_s": self.samples_per_s, "params_M": self.params_M,
                "mfu_percent": self.mfu_percent, "peak_mem_mb": self.peak_mem_mb,
                "final_train_loss": self.final_train_loss, "global_batch": self.global_batch,
                "processes": self.processes}


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident memory: data held, models, caches, all of it."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def fit(model: nn.Module, optimizer: torch.optim.Optimizer, batches, loss_fn: Callable, run: Run, *,
        device: torch.device, evaluate: Callable[[nn.Module], dict[str, float]],
        update_hparams: Callable[[torch.optim.Optimizer, float, int], float],
        settings: LoopSettings | None = None, on_step: Callable[[float, int], None] | None = None,
        keep: dict | None = None) -> FitResult:
    """Train ``model`` until ``run.budget`` is spent; returns the stats and the final evaluation.

    ``loss_fn(model, batch) -> scalar loss`` (moves the batch to the device itself);
    ``update_hparams(optimizer, progress, step) -> lr multiplier`` applies the schedules;
    ``on_step(progress, step)`` runs before each step (e.g. to unfreeze layers at a stage boundary);
    ``keep`` names more objects with ``state_dict``/``load_state_dict`` (a ``BestState``, say) that the
    checkpoint carries, so a resumed run ends exactly where an uninterrupted one does.
    From ``run``: the budget, the checkpoint to write and the one to resume from, the log, and where each
    evaluation and the training loss every 1% of the budget go (``record_eval``, ``record_train``); a run with
    a ``fit_handler`` (``zoo doctor``) hands it these parts instead of training.

    Under torchrun (N processes) ``batches`` is sharded by rank, the model trains under DDP (or as the
    recipe sharded it with FSDP2), and the loss, step time and stop/save decisions are agreed by all ranks
    each time the losses are read (``sync_every``), so every rank takes the same number of steps; rank 0 writes
    the checkpoint.
    """
    s = settings or LoopSettings()
    if run.fit_handler is not None:
        return run.fit_handler(model=model, optimizer=optimizer, batches=batches, loss_fn=loss_fn, device=device,
                               update_hparams=update_hparams, settings=s, on_step=on_step)
    parts = prepare_step(model, optimizer, batches, device, s, run.log)
    keep, counters, metrics = keep or {}, Counters(), {}
    if run.resume_from is not None:
        metrics = resume(run.resume_from, parts, counters, keep, run.log)
    t = LoopState(run, parts, counters, keep, metrics)
    try:
        with t.stop:
            while True:
                progress = t.progress()
                if t.eval_due(progress):
                    record_eval(t, progress, evaluate)
                if progress >= 1.0:
                    break
                t.checkpoint_if_due()
                if on_step:
                    on_step(progress, counters.step)
                    parts.follow_trainable()
                t.lr_mult = update_hparams(optimizer, progress, counters.step)
                t.open_window()
                loss, t.grad_norm, counted_flops = optimizer_step(parts, loss_fn, counters, progress)
                t.count_step(loss, counted_flops)
                t.read_losses_if_due()
                record_train_if_due(t)
                log_progress_if_due(t)
        t.finish()
    finally:
        t.release()
    return fit_result(t)


def fit_result(t: LoopState) -> FitResult:
    """The run's stats: throughput and MFU over the timed steps only; the weights evaluated (the EMA's if on)."""
    c, timing, peak = t.counters, t.timing, t.peak
    flops_per_step = max(c.flops_per_step, 0.0)
    mfu = (100 * flops_per_step * timing.steps / timing.seconds / peak if peak and timing.seconds > 0
           else float("nan"))
    if peak:
        over = "; over 100%: these convolutions beat that matmul (oneDNN, Winograd)" if mfu > 100 else ""
        t.run.report("mfu_of", peak_label(t.parts.device, peak, t.parts.precision) + over)
    return FitResult(steps=c.step, epochs=c.step / t.steps_per_epoch, train_seconds=c.train_seconds,
                     samples=c.samples, params_M=t.params_M, flops_per_step=flops_per_step, mfu_percent=mfu,
                     peak_mem_mb=peak_memory_mb(t.parts.device), final_train_loss=c.last_loss,
                     metrics=t.metrics, eval_model=t.parts.eval_model, global_batch=t.global_batch,
                     processes=t.world,
                     samples_per_s=t.global_batch * timing.steps / timing.seconds if timing.seconds > 0 else math.nan)
