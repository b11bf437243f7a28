"""The one training loop every torch recipe shares.

Budget in seconds, steps or epochs (time excludes evaluation, checkpointing and the first compiled
steps); gradient accumulation with the loss divided by the number of micro-steps; clipping;
divergence fast-fail; GC frozen after the first step; periodic and final evaluation (on EMA weights
when EMA is on); atomic checkpoints and exact resume; throughput, MFU and peak memory.
"""
from __future__ import annotations

import contextlib
import gc
import math
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Annotated, Literal

import torch
from torch import nn

from recipe_zoo.core import checkpoint as ckpt
from recipe_zoo.core import distributed, profiling
from recipe_zoo.core.api import Count, Fraction, NonNegative, NonNegativeInt, Range, Run, Unit
from recipe_zoo.core.flops import counting_flops, peak_flops, peak_label
from recipe_zoo.core.precision import (autocast, enable_activation_checkpointing, grad_scaler, maybe_compile,
                              resolve_precision)
from recipe_zoo.core.weights import EMA

DIVERGENCE_HINT = ("lower the LR 3-10x; clip gradients at 1.0; check inputs for inf/NaN; "
                   "logit soft-capping or QK-norm for transformers; check initialisation "
                   "(zero-init output projections); check the loss reduction under accumulation")


class Diverged(RuntimeError):
    def __init__(self, step: int, loss: float, bound: float):
        self.step, self.loss = step, loss
        why = "non-finite" if not math.isfinite(loss) else f"above the bound {bound:.4g}"
        super().__init__(f"loss {loss:.4g} at step {step} is {why}. Try: {DIVERGENCE_HINT}")


class Interrupted(RuntimeError):
    def __init__(self, signum: int, step: int):
        self.signum, self.step = signum, step
        super().__init__(f"{signal.Signals(signum).name} at step {step}; checkpoint saved, resumable")


class OutOfMemory(RuntimeError):
    """A training step ran out of device (or host) memory; carries what the fixes need to name."""

    def __init__(self, step: int, micro_batch: int, accum_steps: int, device: torch.device, precision: str,
                 can_checkpoint: bool, detail: str, recoverable: bool = False):
        self.step, self.micro_batch, self.accum_steps = step, micro_batch, accum_steps
        self.recoverable = recoverable  # an accelerator allocator's clean error (torch.OutOfMemoryError)
        self.device, self.precision, self.can_checkpoint = device, precision, can_checkpoint
        self.detail = detail.strip().splitlines()[-1][:200] if detail.strip() else "out of memory"
        super().__init__(f"out of memory at step {step} with a micro-batch of {micro_batch} "
                         f"(x{accum_steps} accumulation): {self.detail}")


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA/MPS out-of-memory errors and the CPU allocator's failure (a RuntimeError) alike."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower())


@dataclass
class LoopSettings:
    accum_steps: Count = 1  # micro-batches per optimizer step
    clip_grad: NonNegative = 0.0  # max global grad norm (0 = no clipping)
    ema_decay: Fraction = 0.0  # EMA of weights used for evaluation (0 = off)
    lookahead: Fraction = 0.0  # every 5 steps pull the weights to their EMA, decay this^5 x progress^3 (0 = off)
    eval_every: Unit = 0.25  # fraction of the budget between evaluations (0 = only at the end)
    epoch_cap: NonNegative = 0.0  # time budgets: training also ends after this many epochs, schedule too (0 = none)
    checkpoint_every: NonNegative = 120.0  # seconds of wall time between checkpoints
    diverge_factor: Annotated[float, Range(1, low_open=True)] = 10.0  # diverged when loss > this x first, or NaN/inf
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on GPUs with it, else fp16; CPU fp32
    compile: bool = False  # torch.compile the model for training
    activation_checkpointing: bool = False  # recompute each block in backward (models exposing .blocks)
    log_every: NonNegative = 10.0  # seconds of wall time between progress lines (0 = every step)
    sync_every: NonNegativeInt = 0  # steps between reads of the loss off the device (0 = 1 on CPU, 16 on GPUs)
    profile: NonNegativeInt = 0  # steps traced by torch.profiler after the compiling ones, untimed (profile.txt)
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


class _StopSignals:
    """SIGINT/SIGTERM set a flag the loop reads between steps; a second signal stops at once, except under
    torchrun, whose agent passes on the Ctrl-C each worker already got (and kills them itself after 30 s)."""

    def __init__(self):
        self.signum: int | None = None
        self._old: dict = {}

    def _handle(self, signum, frame):
        if self.signum is not None:
            if distributed.launched():
                return
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident memory: data held, models, caches, all of it."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


TRAIN_LOG_EVERY = 0.01  # a train-loss row per 1% of the budget: smooth curves, deterministic under step budgets


def eval_thresholds(every: float) -> list[float]:
    if every <= 0:
        return [1.0]
    k = max(1, int(math.ceil(1 / every - 1e-9)))
    return [min(1.0, every * i) for i in range(1, k)] + [1.0]


@dataclass
class _State:
    step: int = 0
    train_seconds: float = 0.0
    samples: int = 0
    next_eval: int = 0
    first_loss: float = float("nan")
    window_loss: float = 0.0
    window_steps: int = 0
    last_loss: float = float("nan")
    next_train_log: int = 1  # train rows are logged at every TRAIN_LOG_EVERY of progress
    train_window_loss: float = 0.0
    train_window_steps: int = 0
    flops_per_step: float = -1.0  # counted on the run's first step (-1: not yet); a resumed run never counts again


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
    if run.fit_handler is not None:
        return run.fit_handler(model=model, optimizer=optimizer, batches=batches, loss_fn=loss_fn, device=device,
                               update_hparams=update_hparams, settings=settings or LoopSettings(), on_step=on_step)
    budget, checkpoint_path, resume_from, log = run.budget, run.checkpoint_path, run.resume_from, run.log
    s = settings or LoopSettings()
    world, rank = distributed.world_size(), distributed.rank()
    fsdp = distributed.fsdp_sharded(model)
    if fsdp and (s.ema_decay > 0 or s.lookahead > 0):
        raise ValueError("EMA and lookahead keep a full copy of the weights: turn them off under FSDP")
    if world > 1:
        distributed.join_processes(model, optimizer, batches, device, fsdp, s.sync_batchnorm, s.lr_scaling, log)
    precision = resolve_precision(device, s.precision)
    scaler = grad_scaler(device, precision)
    ema = EMA(model, s.ema_decay) if s.ema_decay > 0 else None
    # Lookahead in airbench's form: the slow weights are an EMA the fast weights are reset to.
    slow = EMA(model, s.lookahead) if s.lookahead > 0 else None
    if s.activation_checkpointing:  # after the EMA copy: the copy must keep plain forwards
        enable_activation_checkpointing(model)

    def trainable() -> list[nn.Parameter]:
        return [p for p in model.parameters() if p.requires_grad]

    def wrap() -> nn.Module:  # DDP syncs the parameters that train when it is built: rebuilt when they change
        wrapped = distributed.wrap_ddp(model, device) if world > 1 and not fsdp else model
        return maybe_compile(wrapped, s.compile)

    params = trainable()
    train_model = wrap()
    untimed_steps = 3 if s.compile else 0  # compiling steps are not charged to the budget
    state = _State()
    keep = keep or {}
    last_metrics: dict[str, float] = {}
    if resume_from is not None:
        last_metrics, used, skipped = ckpt.load_training(resume_from, model, optimizer, scaler, ema, slow, batches,
                                                         state, keep, fsdp)
        if skipped:
            log(f"warning: {skipped}; resuming from the checkpoint kept before it")
        log(f"resumed from {used} at step {state.step} ({state.train_seconds:.1f}s trained)")
    thresholds = eval_thresholds(s.eval_every)
    steps_per_epoch = max(1, batches.batches_per_epoch // s.accum_steps)
    global_batch = batches.batch_size * s.accum_steps * world
    log(f"global batch {global_batch} = {batches.batch_size} per device x {s.accum_steps} accumulation step(s) x "
        f"{world} process(es)" + (" (FSDP2)" if fsdp else " (DDP)" if world > 1 else ""))
    sync_every = s.sync_every or (1 if device.type == "cpu" else 16)
    if sync_every > 1:
        log(f"the loss is read off the device every {sync_every} steps (divergence check, step time)")
    params_M = sum(p.numel() for p in model.parameters()) / 1e6
    peak = peak_flops(device)
    timing = profiling.Timing()
    last_ckpt = last_log = time.time()
    grad_norm = torch.zeros(())
    lr_mult = 0.0
    stop_now = save_now = gc_frozen = False
    capped = s.epoch_cap > 0 and budget.kind == "seconds"
    # Under a time budget a window of unread steps also closes after half a train row's share of the budget
    # (the CPU's clock; one process only: the ranks must close their windows at the same steps).
    window_seconds = TRAIN_LOG_EVERY * budget.amount / 2 if budget.kind == "seconds" and world == 1 else math.inf

    def progress_now() -> float:  # under an epoch cap, the further along of the time and the epochs
        done = budget.progress(seconds=state.train_seconds, steps=state.step, steps_per_epoch=steps_per_epoch)
        return max(done, min(1.0, state.step / (s.epoch_cap * steps_per_epoch))) if capped else done

    def next_threshold() -> float:  # the next progress at which the loop records or stops
        marks = [state.next_train_log * TRAIN_LOG_EVERY, 1.0]
        return min(marks + thresholds[state.next_eval:state.next_eval + 1]) - 1e-12

    window, stop = profiling.LossWindow(), _StopSignals()
    # Every rank counts the traced steps (untimed alike, so the ranks' clocks agree); rank 0 records them.
    tracer = profiling.StepTrace(s.profile, device, run.dir, log, record=rank == 0)

    def close_window() -> None:
        """Read the window's losses (one sync), agree them across processes, check them, charge its time."""
        nonlocal stop_now, save_now, gc_frozen
        if not window.losses:
            return
        values = window.read(device)
        if world > 1:  # one small all-reduce: every rank sees the same losses, time and decisions
            wants_save = rank == 0 and time.time() - last_ckpt > s.checkpoint_every
            reduced = distributed.all_reduce_sum(values + [window.seconds, float(stop.signum is not None),
                                                           float(wants_save)])
            values = [v / world for v in reduced[:len(values)]]
            window.seconds, stop_now, save_now = reduced[-3] / world, reduced[-2] > 0, reduced[-1] > 0
        first = state.step - len(values)
        for i, value in enumerate(values):
            _check_divergence(state, first + i, value, s.diverge_factor)
            _count_loss(state, value)
        if window.timed:
            state.train_seconds += window.seconds
            timing.steps += len(values)
            timing.seconds += window.seconds
        window.clear()
        if gc_frozen:
            return
        gc_frozen = True
        gc.collect()  # after the first step the long-lived objects are made: stop the collector scanning them
        gc.freeze()
        gc.disable()

    def save():
        close_window()  # a checkpoint holds only steps whose losses were read and counted
        if checkpoint_path is not None:
            ckpt.save_training(checkpoint_path, model, optimizer, scaler, ema, slow, batches, state, keep,
                               last_metrics, fsdp)

    try:
        with stop:
            while True:
                progress = progress_now()
                if state.next_eval < len(thresholds) and progress >= thresholds[state.next_eval] - 1e-12:
                    last_metrics = _evaluate(model, ema, evaluate, device, precision, fsdp)
                    row = _eval_row(state, progress, steps_per_epoch, optimizer, grad_norm, last_metrics)
                    while state.next_eval < len(thresholds) and progress >= thresholds[state.next_eval] - 1e-12:
                        state.next_eval += 1
                    state.window_loss, state.window_steps = 0.0, 0
                    run.record_eval(row)
                if progress >= 1.0:
                    break
                if world == 1:
                    stop_now = stop.signum is not None
                    save_now = time.time() - last_ckpt > s.checkpoint_every
                if stop_now:
                    save()
                    raise Interrupted(stop.signum or signal.SIGTERM, state.step)
                if save_now:
                    save()
                    last_ckpt, save_now = time.time(), False
                if on_step:
                    on_step(progress, state.step)
                    now = trainable()
                    if len(now) != len(params) or any(p is not q for p, q in zip(now, params)):
                        params, train_model = now, wrap()
                lr_mult = update_hparams(optimizer, progress, state.step)
                if not tracer.done and not tracer.active and state.step >= untimed_steps and state.flops_per_step >= 0:
                    close_window()  # the traced steps make windows of their own
                    tracer.start()
                if not window.losses:
                    window.open()
                loss, grad_norm, counted = _one_step(train_model, model, optimizer, batches, loss_fn, s, scaler,
                                                     params, device, precision, state, ema, slow, progress)
                tracer.traced += tracer.active
                window.add(loss, timed=state.step >= untimed_steps and not counted and not tracer.active)
                state.step += 1
                state.samples += global_batch
                if (len(window.losses) >= sync_every or (not window.timed and not tracer.active)
                        or window.elapsed() > window_seconds or progress_now() >= next_threshold()):
                    close_window()
                if tracer.active and tracer.traced >= tracer.steps:
                    close_window()
                    tracer.stop()
                progress = progress_now()
                if progress >= state.next_train_log * TRAIN_LOG_EVERY - 1e-12:
                    row = _train_row(state, progress, steps_per_epoch, optimizer, grad_norm)
                    while progress >= state.next_train_log * TRAIN_LOG_EVERY - 1e-12:
                        state.next_train_log += 1
                    run.record_train(row)
                if time.time() - last_log > s.log_every and not window.losses:
                    last_log = time.time()
                    rate = global_batch * timing.steps / max(timing.seconds, 1e-9)
                    log(f"step {state.step} | {100 * progress_now():5.1f}% | loss {state.last_loss:.4f} | "
                        f"lr x{lr_mult:.3f} | {rate:.0f} samples/s | {state.train_seconds:.1f}s")
        save()
        if tracer.active:  # the run ended inside the trace
            tracer.stop()
        if capped and state.train_seconds < budget.amount:
            log(f"epoch_cap={s.epoch_cap:g}: stopped after {state.step / steps_per_epoch:.2f} epochs, "
                f"{state.train_seconds:.1f}s of the {budget} budget")
    finally:
        tracer.abandon()
        gc.enable()
        gc.unfreeze()
    flops_per_step = max(state.flops_per_step, 0.0)
    mfu = (100 * flops_per_step * timing.steps / timing.seconds / peak if peak and timing.seconds > 0
           else float("nan"))
    if peak:
        run.report("mfu_of", peak_label(device, peak))
    return FitResult(steps=state.step, epochs=state.step / steps_per_epoch, train_seconds=state.train_seconds,
                     samples=state.samples, params_M=params_M, flops_per_step=flops_per_step, mfu_percent=mfu,
                     peak_mem_mb=peak_memory_mb(device), final_train_loss=state.last_loss,
                     metrics=last_metrics, eval_model=ema.module if ema else model,
                     global_batch=global_batch, processes=world,
                     samples_per_s=global_batch * timing.steps / timing.seconds if timing.seconds > 0 else math.nan)


def _one_step(train_model, model, optimizer, batches, loss_fn, s: LoopSettings, scaler, params, device, precision,
              state: _State, ema, slow, progress: float) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """One optimizer step with the EMA and lookahead updates: (loss on the device, grad norm, whether FLOPs were
    counted).

    FLOPs are counted once, on the run's first step (which is then not timed). The counter runs the ops under a
    dispatch mode, which can round differently: a resumed run reuses the saved count."""
    counting = state.flops_per_step < 0
    try:
        with counting_flops() if counting else contextlib.nullcontext() as counter:
            loss, grad_norm = _train_step(train_model, optimizer, batches, loss_fn, s, scaler, params, device,
                                          precision)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        raise OutOfMemory(state.step, batches.batch_size, s.accum_steps, device, precision, hasattr(model, "blocks"),
                          str(exc), recoverable=isinstance(exc, torch.OutOfMemoryError)) from None
    if counting:
        state.flops_per_step = float(counter.get_total_flops())
    if slow is not None and (state.step + 1) % 5 == 0:
        slow.update(model, decay=s.lookahead ** 5 * progress ** 3)
        slow.copy_to(model)
    if ema is not None:
        ema.update(model)
    return loss, grad_norm, counting


def _count_loss(state: _State, loss: float) -> None:
    state.window_loss += loss
    state.window_steps += 1
    state.train_window_loss += loss
    state.train_window_steps += 1
    state.last_loss = loss


def _train_step(model, optimizer, batches, loss_fn, s: LoopSettings, scaler, params, device, precision):
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


def _check_divergence(state: _State, step: int, loss: float, factor: float) -> None:
    if step == 0:
        state.first_loss = loss
    bound = factor * state.first_loss if state.first_loss > 0 else float("inf")
    if not math.isfinite(loss) or loss > bound:
        raise Diverged(step, loss, bound)


def _evaluate(model, ema, evaluate, device, precision, fsdp: bool = False) -> dict[str, float]:
    """Every rank evaluates (under FSDP the forwards are collective); the ranks' batch-norm buffers are made
    rank 0's first, and rank 0's numbers are the ones every rank goes on with."""
    target = ema.module if ema is not None else model
    if not fsdp:
        distributed.broadcast_buffers(target)
    was_training = target.training
    target.eval()
    with torch.no_grad(), autocast(device, precision):
        metrics = evaluate(target)
    target.train(was_training)
    return distributed.broadcast_object({k: float(v) for k, v in metrics.items()})


def _eval_row(state: _State, progress, steps_per_epoch, optimizer, grad_norm, metrics) -> dict:
    train_loss = state.window_loss / state.window_steps if state.window_steps else float("nan")
    return {"step": state.step, "epoch": round(state.step / steps_per_epoch, 4), "progress": round(progress, 4),
            "train_seconds": round(state.train_seconds, 3), "train_loss": train_loss, "lr": optimizer.param_groups[0]["lr"],
            "grad_norm": float(grad_norm), **metrics}


def _train_row(state: _State, progress, steps_per_epoch, optimizer, grad_norm) -> dict:
    row = {"step": state.step, "epoch": round(state.step / steps_per_epoch, 4), "progress": round(progress, 4),
           "train_seconds": round(state.train_seconds, 3),
           "train_loss": state.train_window_loss / max(1, state.train_window_steps),
           "lr": optimizer.param_groups[0]["lr"], "grad_norm": float(grad_norm)}
    state.train_window_loss, state.train_window_steps = 0.0, 0
    return row
