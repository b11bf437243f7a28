"""Copies of a model's weights kept beside training: an exponential moving average (also lookahead's slow
weights, ``core.train_step``) and the weights at the best validation value so far (``BestState``)."""
from __future__ import annotations

import copy

import torch
from torch import nn


class EMA:
    """Exponential moving average of parameters and buffers, with the decay warmed up from 0."""

    def __init__(self, model: nn.Module, decay: float):
        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        self.decay, self.updates = decay, 0

    @torch.no_grad()
    def update(self, model: nn.Module, decay: float | None = None) -> None:
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates)) if decay is None else decay
        for e, m in zip(self.module.state_dict().values(), model.state_dict().values()):
            if e.dtype.is_floating_point:
                e.lerp_(m, 1 - d)
            else:
                e.copy_(m)

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        for e, m in zip(self.module.state_dict().values(), model.state_dict().values()):
            m.copy_(e)

    def state_dict(self) -> dict:
        return {"module": self.module.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])
        self.updates = int(state["updates"])


class BestState:
    """The model's weights at its best validation value so far: early stopping that keeps training to
    the end of the budget and returns to the best point (restored with ``restore``)."""

    def __init__(self, higher_is_better: bool):
        self.higher = higher_is_better
        self.value: float | None = None
        self.state: dict | None = None

    def update(self, value: float, model: nn.Module) -> None:
        if self.value is None or (value > self.value if self.higher else value < self.value):
            self.value = value
            self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def restore(self, model: nn.Module) -> None:
        model.load_state_dict(self.state)

    def state_dict(self) -> dict:  # kept in the checkpoint (``fit(keep=...)``): a resumed run returns to the same best
        return {"value": self.value, "state": self.state}

    def load_state_dict(self, state: dict) -> None:
        self.value, self.state = state["value"], state["state"]
