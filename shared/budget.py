"""Training budgets: seconds, optimizer steps or epochs, parsed from ``90s``, ``5m``, ``300steps``."""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from decimal import Decimal

_UNITS = {"s": ("seconds", 1), "sec": ("seconds", 1), "m": ("seconds", 60), "min": ("seconds", 60),
          "h": ("seconds", 3600), "steps": ("steps", 1), "step": ("steps", 1),
          "epochs": ("epochs", 1), "epoch": ("epochs", 1)}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Budget:
    kind: str  # "seconds" | "steps" | "epochs"
    amount: float

    def __str__(self) -> str:
        """The text that parses back to this budget: ``90s``, ``5m``, ``300steps``."""
        if self.kind == "seconds":
            s = self.amount
            if s >= 60 and s % 60 == 0 and (s // 60) * 60 == s:
                return f"{_number(s // 60)}m"
            return f"{_number(s)}s"
        return f"{_number(self.amount)}{self.kind}"

    def progress(self, *, seconds: float, steps: int, steps_per_epoch: int) -> float:
        if self.kind == "seconds":
            done = seconds / self.amount
        elif self.kind == "steps":
            done = steps / self.amount
        else:
            done = steps / (self.amount * steps_per_epoch)
        return min(1.0, done)


def _number(x: float) -> str:
    """``x`` as short as ``%g`` writes it, in full where that would round it or use an exponent (which
    the parser does not read): 1e-07 -> 0.0000001, 12345678.0 -> 12345678."""
    text = f"{x:g}"
    if "e" in text or float(text) != x:
        text = format(Decimal(repr(x)), "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    return text


def parse_budget(text: str) -> Budget:
    """``90s``, ``5m``, ``1h``, ``300steps``, ``3epochs``; the amount must be positive."""
    m = _PATTERN.match(str(text).lower())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"budget {text!r}: expected a number and a unit, e.g. 90s, 5m, 1h, 300steps, 3epochs")
    kind, scale = _UNITS[m.group(2)]
    amount = float(m.group(1)) * scale
    if amount <= 0:
        raise ValueError(f"budget {text!r} must be positive")
    if not math.isfinite(amount):
        raise ValueError(f"budget {text!r} is too large")
    if kind == "steps" and amount != int(amount):
        raise ValueError(f"budget {text!r}: steps must be a whole number")
    return Budget(kind, amount)


def xgboost_time_limit(seconds: float):
    """An XGBoost callback that stops boosting once ``seconds`` of wall time are spent."""
    import xgboost as xgb

    class TimeLimit(xgb.callback.TrainingCallback):
        def before_training(self, model):
            self.start = time.perf_counter()
            return model

        def after_iteration(self, model, epoch, evals_log):
            # Never on the first round: XGBoost stops at the first callback that says so, and an early-stopping
            # callback that has not yet seen a round leaves the model without a best iteration (a crash, seen on a
            # loaded machine with a 6 s budget over 3 folds).
            return epoch > 0 and time.perf_counter() - self.start > seconds

    return TimeLimit()
