"""Schedules as plain functions of progress in [0, 1].

Progress is steps done over total steps, or seconds trained over the time budget, so one schedule
serves both kinds of budget and runs on different hardware stay comparable.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

Schedule = Callable[[float], float]


def _warmup(progress: float, warmup: float, start: float = 0.0) -> float | None:
    """Linear from ``start`` to 1 over the first ``warmup`` fraction; None after it."""
    if warmup > 0 and progress < warmup:
        return start + (1 - start) * progress / warmup
    return None


def constant(progress: float, warmup: float = 0.0, start: float = 0.0) -> float:
    w = _warmup(progress, warmup, start)
    return 1.0 if w is None else w


def linear(progress: float, warmup: float = 0.0, final: float = 0.0, start: float = 0.0) -> float:
    """Warmup, then a straight line down to ``final`` (a one-cycle when ``start`` > 0)."""
    w = _warmup(progress, warmup, start)
    if w is not None:
        return w
    t = (progress - warmup) / max(1e-12, 1 - warmup)
    return 1.0 - (1.0 - final) * min(1.0, t)


def warmup_cosine(progress: float, warmup: float = 0.05, final: float = 0.0, start: float = 0.0) -> float:
    w = _warmup(progress, warmup, start)
    if w is not None:
        return w
    t = min(1.0, (progress - warmup) / max(1e-12, 1 - warmup))
    return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * t))


def wsd(progress: float, warmup: float = 0.0, decay: float = 0.4, final: float = 0.0, start: float = 0.0) -> float:
    """Warmup-stable-decay: flat at 1, then linear to ``final`` over the last ``decay`` fraction."""
    w = _warmup(progress, warmup, start)
    if w is not None:
        return w
    start = 1.0 - decay
    if progress < start:
        return 1.0
    t = min(1.0, (progress - start) / max(1e-12, decay))
    return 1.0 - (1.0 - final) * t


SCHEDULES: dict[str, Callable[..., float]] = {
    "cosine": warmup_cosine, "wsd": wsd, "linear": linear, "constant": constant,
}


def make_schedule(name: str, warmup: float = 0.0, decay: float = 0.4, final: float = 0.0,
                  start: float = 0.0) -> Schedule:
    """LR multiplier by name; ``decay`` only matters for WSD, ``final`` not for constant;
    warmup rises linearly from ``start`` (a fraction of the peak) to 1."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose one of {sorted(SCHEDULES)}")
    if name == "constant":
        return partial(constant, warmup=warmup, start=start)
    if name == "wsd":
        return partial(wsd, warmup=warmup, decay=decay, final=final, start=start)
    return partial(SCHEDULES[name], warmup=warmup, final=final, start=start)


def weight_decay_linear(progress: float) -> float:
    """Weight decay multiplier decaying linearly to zero over training."""
    return max(0.0, 1.0 - progress)


def muon_momentum(step: int, start: float = 0.85, end: float = 0.95, warmup_steps: int = 300) -> float:
    t = min(1.0, step / max(1, warmup_steps))
    return start + (end - start) * t


def set_base_hparams(optimizer: torch.optim.Optimizer) -> None:
    """Remember each group's configured LR and weight decay once, as the peaks schedules scale."""
    for g in optimizer.param_groups:
        g.setdefault("base_lr", g["lr"])
        g.setdefault("base_weight_decay", g.get("weight_decay", 0.0))


def apply_schedules(optimizer: torch.optim.Optimizer, progress: float, step: int, lr: Schedule,
                    weight_decay: Schedule | None = None, momentum: Callable[[int], float] | None = None) -> float:
    """Set every group's LR (and optionally WD, Muon momentum) for this step; returns the LR multiplier."""
    set_base_hparams(optimizer)
    mult = lr(progress)
    wd_mult = weight_decay(progress) if weight_decay else 1.0
    for g in optimizer.param_groups:
        g["lr"] = g["base_lr"] * mult
        if "weight_decay" in g:
            g["weight_decay"] = g["base_weight_decay"] * wd_mult
        if momentum is not None and g.get("optimizer") == "muon":
            g["momentum"] = momentum(step)
    return mult
