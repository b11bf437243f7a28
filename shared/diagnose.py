"""Diagnostics from the debugging checklist: per-layer relative weight change for fine-tuning."""
from __future__ import annotations

import torch
from torch import nn


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def relative_weight_change(model: nn.Module, initial: dict[str, torch.Tensor]) -> dict[str, float]:
    """||w - w0|| / ||w0|| per parameter tensor; above ~0.1 the LR is likely too high for transfer."""
    out = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            w0 = initial.get(name)
            if w0 is None or w0.shape != p.shape:
                continue
            norm0 = w0.float().norm().item()
            if norm0 > 0:
                out[name] = (p.float() - w0.float()).norm().item() / norm0
    return out
