"""A training step's time: the loop's windows of unread losses and timed steps, and where the time goes.

``LossWindow`` holds the steps whose losses are still on the device and charges their wall time when it reads
them (``sync_every``); ``Timing`` counts the timed steps that throughput and MFU are computed over.

``profile=N`` traces N optimizer steps with ``torch.profiler``. The traced steps are the first ones the loop
would time (after compiling and the FLOP-counting step); like the FLOP-counting step (the zoo's instruments, not
the training's cost) they are not charged to a time budget nor counted in throughput or MFU, since the tracer
slows the host; the compiling steps are charged to the budget. The run folder gets
``profile.txt``: the device's busy share of the traced wall time (kernels' time, overlaps merged: the rest is
the device waiting on the host), the loop's own sections (data, forward and backward, clipping, optimizer) and
the ops by self time on the device (by self CPU time on a CPU); and ``trace.json.gz`` for chrome://tracing or
Perfetto.
"""
from __future__ import annotations

import gzip
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function


@dataclass
class Timing:
    """The steps this process timed (not compiling, FLOP-counting or traced ones): throughput and MFU."""

    steps: int = 0
    seconds: float = 0.0


class LossWindow:
    """Steps whose losses are still on the device. Reading a loss waits for the device to finish; on a GPU
    that sync each step leaves it idle while the host prepares the next one, so the losses are read, checked
    and charged their wall time together every few steps (``sync_every``)."""

    def __init__(self):
        self.losses: list[torch.Tensor] = []
        self.timed, self.charged, self.t0, self.seconds = True, True, 0.0, 0.0

    def open(self) -> None:
        self.t0 = time.perf_counter()

    def add(self, loss: torch.Tensor, timed: bool, charged: bool = True) -> None:
        """``timed``: in throughput and MFU; ``charged``: on the budget's clock."""
        self.losses.append(loss)
        self.timed, self.charged = self.timed and timed, self.charged and charged

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def read(self, device: torch.device) -> list[float]:
        values = [self.losses[0].item()] if len(self.losses) == 1 else torch.stack(self.losses).tolist()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.seconds = self.elapsed()
        return values

    def clear(self) -> None:
        self.losses, self.timed, self.charged = [], True, True


SECTIONS = ("zoo::batch", "zoo::forward_backward", "zoo::clip", "zoo::optimizer")


def section(name: str):
    """A named range of the step in a trace (a few microseconds when no trace is on)."""
    return record_function(name)


class StepTrace:
    """Traces ``steps`` optimizer steps; ``start`` before the first, ``stop`` after the last one's sync."""

    def __init__(self, steps: int, device: torch.device, folder: Path, log, record: bool = True):
        self.steps, self.device, self.folder, self.log, self.record = steps, device, folder, log, record
        self.traced, self.active, self.done = 0, False, steps <= 0
        self._prof, self._t0 = None, 0.0

    def start(self) -> None:
        self.active, self._t0 = True, time.perf_counter()
        if self.record:  # under torchrun every rank counts the traced steps; rank 0 records them
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
            try:
                self._prof = profile(activities=activities)
                self._prof.__enter__()
            except Exception as exc:  # a trace is an aid: without one the run goes on (the log says why)
                self._prof = None
                self.log(f"profile: the tracer did not start ({type(exc).__name__}: {exc}); no profile.txt")

    def abandon(self) -> None:
        """Ends a trace that an error cut short, writing nothing."""
        if self._prof is not None:
            self._prof.__exit__(None, None, None)
            self._prof = None
        self.active = False

    def stop(self) -> None:
        """Ends the trace (the caller has synced the device) and writes profile.txt and trace.json.gz."""
        wall_us = (time.perf_counter() - self._t0) * 1e6
        self.active, self.done = False, True
        if self._prof is None:
            return
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        try:
            text = report(prof, self.traced, wall_us, self.device)
        except Exception as exc:  # a profiler whose results read differently: the run and its trace go on
            text = f"{self.traced} optimizer steps traced\nno summary ({type(exc).__name__}: {exc}): see the trace\n"
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "profile.txt").write_text(text)
        self.log(f"profile: {self.traced} steps traced -> profile.txt; " + text.splitlines()[1])
        raw = self.folder / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(self.folder / "trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()


def busy_us(events) -> float:
    """Microseconds in which the device ran at least one kernel or copy (overlapping ones counted once)."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.device_type != torch.autograd.DeviceType.CPU)
    total, end = 0.0, -float("inf")
    for a, b in spans:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def report(prof, steps: int, wall_us: float, device: torch.device) -> str:
    on_device = device.type != "cpu"
    averages = prof.key_averages()
    per_step_ms = wall_us / 1e3 / max(steps, 1)
    lines = [f"{steps} optimizer steps traced on {device.type}: {per_step_ms:.1f} ms a step (the tracer adds to it)"]
    if on_device:
        busy = busy_us(prof.events())
        lines.append(f"device busy {100 * busy / max(wall_us, 1e-9):.1f}% of the traced wall time "
                     f"({busy / 1e3 / max(steps, 1):.1f} ms of kernels a step; the rest the device waits on the host)")
    else:
        lines.append(f"host time {per_step_ms:.1f} ms a step (no device: the table is by self CPU time)")
    by_name = {a.key: a for a in averages}
    lines += ["", "the loop's sections, a step:"]
    for name in SECTIONS:
        if name in by_name:
            a = by_name[name]
            device_ms = f", device {a.device_time_total / 1e3 / max(steps, 1):8.2f} ms" if on_device else ""
            lines.append(f"  {name:<24} host {a.cpu_time_total / 1e3 / max(steps, 1):8.2f} ms{device_ms}")
    sort = "self_device_time_total" if on_device else "self_cpu_time_total"
    lines += ["", f"ops by {sort}:", averages.table(sort_by=sort, row_limit=30, max_name_column_width=60)]
    return "\n".join(lines) + "\n"
