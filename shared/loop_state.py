"""The state of one ``fit`` between its steps, and its checkpoint.

``Counters`` are what the checkpoint carries of the loop (its ``"loop"`` entry, the field names its keys: a resume
of an older checkpoint reads them back by name). ``LoopState`` adds this process's own: the window of steps whose
losses are still on the device and the time charged to the budget, the progress through the budget and the marks
at which the loop evaluates, records or stops, the stop signals, the clocks of the last checkpoint and log line,
and the profiler's trace.
"""
from __future__ import annotations

import gc
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from recipe_zoo.core import checkpoint as ckpt
from recipe_zoo.core import distributed, profiling
from recipe_zoo.core.api import Run
from recipe_zoo.core.flops import peak_flops
from recipe_zoo.core.train_step import StepParts
from recipe_zoo.core.training_errors import Diverged, Interrupted

TRAIN_LOG_EVERY = 0.01  # a train-loss row per 1% of the budget: smooth curves, deterministic under step budgets


def eval_thresholds(every: float) -> list[float]:
    if every <= 0:
        return [1.0]
    k = max(1, int(math.ceil(1 / every - 1e-9)))
    return [min(1.0, every * i) for i in range(1, k)] + [1.0]


@dataclass
class Counters:
    """The loop's counters: the checkpoint's "loop" entry is ``vars`` of them, read back field by field."""

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

    def count_loss(self, loss: float) -> None:
        self.window_loss += loss
        self.window_steps += 1
        self.train_window_loss += loss
        self.train_window_steps += 1
        self.last_loss = loss

    def check_divergence(self, step: int, loss: float, factor: float) -> None:
        if step == 0:
            self.first_loss = loss
        bound = factor * self.first_loss if self.first_loss > 0 else float("inf")
        if not math.isfinite(loss) or loss > bound:
            raise Diverged(step, loss, bound)


class StopSignals:
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


def resume(path: str | Path, parts: StepParts, counters: Counters, keep: dict, log) -> dict[str, float]:
    """Loads ``fit``'s checkpoint (``path``, or the one kept before it) into the parts, the counters and ``keep``;
    returns the last evaluation's metrics."""
    metrics, used, skipped = ckpt.load_training(path, parts.model, parts.optimizer, parts.scaler, parts.ema,
                                                parts.slow, parts.batches, counters, keep, parts.fsdp,
                                                parts.precision)
    if skipped:
        log(f"warning: {skipped}; resuming from the checkpoint kept before it")
    log(f"resumed from {used} at step {counters.step} ({counters.train_seconds:.1f}s trained)")
    return metrics


class LoopState:
    """One ``fit`` between its steps. Made after a resume (which fills ``counters`` and ``metrics``): it logs the
    global batch and how often the loss is read off the device."""

    def __init__(self, run: Run, parts: StepParts, counters: Counters, keep: dict, metrics: dict[str, float]):
        s, batches, device = parts.settings, parts.batches, parts.device
        self.run, self.parts, self.s, self.keep, self.log = run, parts, s, keep, run.log
        self.checkpoint_path = run.checkpoint_path
        self.budget, self.world, self.rank = run.budget, parts.world, distributed.rank()
        self.counters, self.metrics = counters, metrics  # metrics: the last evaluation's
        self.untimed_steps = 3 if s.compile else 0  # compiling steps: charged to the budget, not in the throughput
        self.thresholds = eval_thresholds(s.eval_every)
        self.steps_per_epoch = max(1, batches.batches_per_epoch // s.accum_steps)
        self.global_batch = batches.batch_size * s.accum_steps * self.world
        self.log(f"global batch {self.global_batch} = {batches.batch_size} per device x {s.accum_steps} accumulation "
                 f"step(s) x {self.world} process(es)"
                 + (" (FSDP2)" if parts.fsdp else " (DDP)" if self.world > 1 else ""))
        self.sync_every = s.sync_every or (1 if device.type == "cpu" else 16)
        if self.sync_every > 1:
            self.log(f"the loss is read off the device every {self.sync_every} steps (divergence check, step time)")
        self.params_M = sum(p.numel() for p in parts.model.parameters()) / 1e6
        self.peak = peak_flops(device, parts.precision)
        self.timing = profiling.Timing()
        self.last_ckpt = self.last_log = time.time()
        self.grad_norm = torch.zeros(())
        self.lr_mult = 0.0
        self.stop_now = self.save_now = self.gc_frozen = False
        self.capped = s.epoch_cap > 0 and self.budget.kind == "seconds"
        # Under a time budget a window of unread steps also closes after half a train row's share of the budget
        # (the CPU's clock; one process only: the ranks must close their windows at the same steps).
        self.window_seconds = (TRAIN_LOG_EVERY * self.budget.amount / 2
                               if self.budget.kind == "seconds" and self.world == 1 else math.inf)
        self.window, self.stop = profiling.LossWindow(), StopSignals()
        # Every rank counts the traced steps (untimed alike, so the ranks' clocks agree); rank 0 records them.
        self.tracer = profiling.StepTrace(s.profile, device, run.dir, run.log, record=self.rank == 0)

    def progress(self) -> float:
        """The share of the budget spent; under an epoch cap, the further along of the time and the epochs."""
        c = self.counters
        done = self.budget.progress(seconds=c.train_seconds, steps=c.step, steps_per_epoch=self.steps_per_epoch)
        return max(done, min(1.0, c.step / (self.s.epoch_cap * self.steps_per_epoch))) if self.capped else done

    def next_threshold(self) -> float:
        """The next progress at which the loop records or stops."""
        c = self.counters
        marks = [c.next_train_log * TRAIN_LOG_EVERY, 1.0]
        return min(marks + self.thresholds[c.next_eval:c.next_eval + 1]) - 1e-12

    def eval_due(self, progress: float) -> bool:
        c = self.counters
        return c.next_eval < len(self.thresholds) and progress >= self.thresholds[c.next_eval] - 1e-12

    def open_window(self) -> None:
        """Before a step: starts the trace when its steps are due (they make windows of their own), and the clock of
        a new window unless one is open."""
        tracer, c = self.tracer, self.counters
        if not tracer.done and not tracer.active and c.step >= self.untimed_steps and c.flops_per_step >= 0:
            self.close_window()
            tracer.start()
        if not self.window.losses:
            self.window.open()

    def count_step(self, loss: torch.Tensor, counted_flops: bool) -> None:
        """After a step: its loss joins the window, timed for throughput unless compiling, counting FLOPs or traced,
        and charged to the budget unless counting FLOPs or traced."""
        c, tracer = self.counters, self.tracer
        tracer.traced += tracer.active
        instruments = counted_flops or tracer.active  # the zoo's own measuring: neither timed nor charged
        self.window.add(loss, timed=c.step >= self.untimed_steps and not instruments, charged=not instruments)
        c.step += 1
        c.samples += self.global_batch

    def read_losses_if_due(self) -> None:
        """Closes the window every ``sync_every`` steps, after an untimed step, when its time is up or a mark is
        reached; and after the last traced step, ending the trace."""
        window, tracer = self.window, self.tracer
        if (len(window.losses) >= self.sync_every or (not window.timed and not tracer.active)
                or window.elapsed() > self.window_seconds or self.progress() >= self.next_threshold()):
            self.close_window()
        if tracer.active and tracer.traced >= tracer.steps:
            self.close_window()
            tracer.stop()

    def close_window(self) -> None:
        """Read the window's losses (one sync), agree them across processes, check them, charge its time to the
        budget (and to the throughput when its steps were timed)."""
        window, c, world = self.window, self.counters, self.world
        if not window.losses:
            return
        values = window.read(self.parts.device)
        if world > 1:  # one small all-reduce: every rank sees the same losses, time and decisions
            wants_save = self.rank == 0 and time.time() - self.last_ckpt > self.s.checkpoint_every
            reduced = distributed.all_reduce_sum(values + [window.seconds, float(self.stop.signum is not None),
                                                           float(wants_save)])
            values = [v / world for v in reduced[:len(values)]]
            window.seconds, self.stop_now, self.save_now = reduced[-3] / world, reduced[-2] > 0, reduced[-1] > 0
        first = c.step - len(values)
        for i, value in enumerate(values):
            c.check_divergence(first + i, value, self.s.diverge_factor)
            c.count_loss(value)
        if window.charged:  # the budget's clock: every training step, compiling ones too
            c.train_seconds += window.seconds
        if window.timed:  # throughput and MFU: the steady steps only
            self.timing.steps += len(values)
            self.timing.seconds += window.seconds
        window.clear()
        if self.gc_frozen:
            return
        self.gc_frozen = True
        # After the first step the long-lived objects are made: stop the collector scanning them. The young
        # generations' garbage goes first; a full collection would also scan every object the process holds (0.3 s
        # in a process that has run others, per run), and the older garbage it could free waits for release().
        gc.collect(1)
        gc.freeze()
        gc.disable()

    def checkpoint_if_due(self) -> None:
        """Saves every ``checkpoint_every`` seconds; on SIGINT/SIGTERM saves and raises ``Interrupted``. Under N
        processes both are decided together when the losses are read."""
        if self.world == 1:
            self.stop_now = self.stop.signum is not None
            self.save_now = time.time() - self.last_ckpt > self.s.checkpoint_every
        if self.stop_now:
            self.save()
            raise Interrupted(self.stop.signum or signal.SIGTERM, self.counters.step)
        if self.save_now:
            self.save()
            self.last_ckpt, self.save_now = time.time(), False

    def save(self) -> None:
        self.close_window()  # a checkpoint holds only steps whose losses were read and counted
        p = self.parts
        if self.checkpoint_path is not None:
            ckpt.save_training(self.checkpoint_path, p.model, p.optimizer, p.scaler, p.ema, p.slow, p.batches,
                               self.counters, self.keep, self.metrics, p.fsdp, p.precision)

    def finish(self) -> None:
        """After the last step: the final checkpoint, a trace the run ended inside, why an epoch cap stopped it."""
        self.save()
        if self.tracer.active:
            self.tracer.stop()
        c = self.counters
        if self.capped and c.train_seconds < self.budget.amount:
            self.log(f"epoch_cap={self.s.epoch_cap:g}: stopped after {c.step / self.steps_per_epoch:.2f} epochs, "
                     f"{c.train_seconds:.1f}s of its {self.budget.amount:.1f}s")

    def release(self) -> None:
        """Whether the loop ended or failed: a trace cut short is dropped, and the collector runs again."""
        self.tracer.abandon()
        gc.enable()
        gc.unfreeze()
