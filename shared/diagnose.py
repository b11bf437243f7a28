"""Measurements behind the debugging checklist (``zoo doctor`` turns them into findings).

Training checks work on a recipe's own parts, the ones it hands to ``recipe_zoo.core.loop.fit``: the model, the
optimizer, the batches and the loss. Each check starts from the same captured state (``Parts.reset``):

- ``overfit_batch``: one batch, many steps; the loss on that batch must fall near zero, and the loss of
  a second, unseen batch shows whether what was learnt carries over (it does not when labels are noise);
- ``lr_range``: Smith's range test, the LR rising exponentially over one short run, per group kind
  (Muon matrices vs AdamW rest) when asked;
- ``health_run``: a short run under the recipe's schedule recording per-layer gradient norms, the LR
  each optimizer step actually used against the schedule, activation statistics and dead units, and
  the relative weight change per tensor.

Data checks work on arrays, tensors, frames or lists of strings: non-finite rows, class counts, row
content hashes (exact duplicates across splits), per-feature statistics.
"""
from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from recipe_zoo.core.train_step import train_step
from recipe_zoo.core.precision import autocast, grad_scaler, resolve_precision


@dataclass
class Parts:
    """What a recipe passes to ``fit``, plus the state they had then (restored between checks)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    batches: object
    loss_fn: Callable
    update_hparams: Callable
    settings: object
    device: torch.device
    on_step: Callable | None = None

    def __post_init__(self):
        self.precision = resolve_precision(self.device, self.settings.precision)
        self._model_state = copy.deepcopy(self.model.state_dict())
        self._optim_state = copy.deepcopy(self.optimizer.state_dict())
        self._groups = len(self.optimizer.param_groups)
        self._trainable = [p.requires_grad for p in self.model.parameters()]
        self._batch_state = self.batches.state_dict()
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.scaler = grad_scaler(self.device, self.precision)

    def reset(self) -> None:
        self.model.load_state_dict(self._model_state)
        for p, flag in zip(self.model.parameters(), self._trainable):
            p.requires_grad_(flag)
        del self.optimizer.param_groups[self._groups:]  # groups a stage change added
        self.optimizer.load_state_dict(copy.deepcopy(self._optim_state))  # groups' hparams too (no base_lr yet)
        self.optimizer.zero_grad(set_to_none=True)
        self.batches.load_state_dict(self._batch_state)
        self.model.train()
        self.scaler = grad_scaler(self.device, self.precision)  # fp16's loss scale starts afresh with each check

    def trainable(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def step(self, batches=None) -> tuple[float, float]:
        """One optimizer step through the loop's own step (accumulation, autocast, clipping)."""
        loss, grad_norm = train_step(self.model, self.optimizer, batches or self.batches, self.loss_fn,
                                     self.settings, self.scaler, self.trainable(), self.device, self.precision)
        return float(loss), float(grad_norm)

    @torch.no_grad()
    def loss_on(self, batch) -> float:
        with autocast(self.device, self.precision):
            return float(self.loss_fn(self.model, batch))


class _Repeat:
    """The same batch again and again, in the shape ``train_step`` expects."""

    def __init__(self, batch, batch_size: int):
        self.batch, self.batch_size = batch, batch_size

    def next_batch(self):
        return self.batch


def _finite(x: float) -> float:
    return x if math.isfinite(x) else float("nan")


def loss_noise(parts: Parts, batch, repeats: int = 3) -> float:
    """Largest relative difference among evaluations of the loss on one batch: above ~1e-4 the loss is
    random itself (noise levels drawn inside it, dropout), so it cannot reach zero even on one batch."""
    parts.reset()
    values = [parts.loss_on(batch) for _ in range(repeats)]
    parts.reset()  # batch norm running statistics moved
    return (max(values) - min(values)) / max(abs(values[0]), 1e-12)


def overfit_batch(parts: Parts, steps: int) -> dict:
    """Train on one batch at the configured LR (no schedule); record its loss and an unseen batch's."""
    parts.reset()
    batch, held = parts.batches.next_batch(), parts.batches.next_batch()
    repeat = _Repeat(batch, parts.batches.batch_size)
    train, held_out = [], []
    for _ in range(steps):
        held_out.append(_finite(parts.loss_on(held)))
        loss, _ = parts.step(repeat)
        train.append(_finite(loss))
        if not math.isfinite(loss):
            break
    final = _finite(parts.loss_on(batch))
    held_out.append(_finite(parts.loss_on(held)))
    parts.reset()
    return {"train": train, "held_out": held_out, "final": final}


def group_kinds(optimizer: torch.optim.Optimizer) -> list[str]:
    """The kind of each parameter group: Muon's and AdamW's in the hybrid, else one kind for all."""
    kinds = [str(g.get("optimizer", "all")) for g in optimizer.param_groups]
    return kinds if len(set(kinds)) > 1 else ["all"] * len(kinds)


def lr_range(parts: Parts, steps: int, low: float = 1e-4, high: float = 1e2, kind: str | None = None,
             beta: float = 0.9, stop_factor: float = 4.0) -> dict:
    """LR multipliers from ``low`` to ``high`` x the configured LR, exponentially over ``steps`` steps.

    Only the groups of ``kind`` move; the rest train at their configured LR (held still, a group kind often
    cannot lower the loss alone: a GPT's matrices behind a frozen, near-zero head). The loss is smoothed by a
    bias-corrected EMA; the run stops once the smoothed loss passes ``stop_factor`` x its minimum.
    Two classic readings bracket the good LR: the steepest descent of the smoothed loss (before its minimum;
    early-biased when the loss falls over decades just from training progress) and a tenth of the LR at the
    minimum (Smith 2017; conservative). The suggestion is their geometric mean: against the best LR of a sweep
    it was within 2x on three problems where each reading alone missed by 3.5-7x on one of them (issue 12's
    closing note). For one kind of several, the others' training makes the loss fall from the first step
    whatever this kind's LR, so the steepest point means nothing there and the suggestion is the tenth of
    the minimum.
    """
    parts.reset()
    kinds = group_kinds(parts.optimizer)
    moving = [i for i, k in enumerate(kinds) if kind in (None, k)]
    mults, losses, smooth = [], [], []
    avg, best = 0.0, float("inf")
    ratio = (high / low) ** (1 / max(1, steps - 1))
    for i in range(steps):
        mult = low * ratio ** i
        for j in moving:
            parts.optimizer.param_groups[j]["lr"] = parts.base_lrs[j] * mult
        loss, _ = parts.step()
        mults.append(mult)
        losses.append(_finite(loss))
        if not math.isfinite(loss):
            break
        avg = beta * avg + (1 - beta) * loss
        s = avg / (1 - beta ** (i + 1))
        smooth.append(s)
        best = min(best, s)
        if i > steps // 10 and s > stop_factor * best:
            break
    parts.reset()
    result = {"kind": kind or "all", "mults": mults, "losses": losses, "smoothed": smooth}
    if len(smooth) < 5:
        return {**result, "min_mult": float("nan"), "steepest_mult": float("nan"), "suggested_mult": float("nan")}
    s = np.array(smooth)
    lo_idx = len(s) // 10  # the first steps are mostly the smoothing's warmup
    i_min = lo_idx + int(np.argmin(s[lo_idx:]))
    grads = np.gradient(s, np.log(np.array(mults[:len(s)])))
    i_steep = lo_idx + int(np.argmin(grads[lo_idx:i_min + 1])) if i_min > lo_idx else i_min
    return {**result, "min_mult": mults[i_min], "steepest_mult": mults[i_steep], "suggested_mult": math.sqrt(mults[i_steep] * mults[i_min] / 10) if kind is None else mults[i_min] / 10,
            "tenth_of_min_mult": mults[i_min] / 10,
            "fell": bool(s[i_min] < 0.9 * s[lo_idx])}


_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.Mish)
_RELUS = (nn.ReLU, nn.ReLU6)


class _ActivationProbe:
    """Forward hooks on leaf modules: mean, std, and for ReLUs the fraction of units never positive."""

    def __init__(self, model: nn.Module):
        self.stats: dict[str, dict] = {}
        self.active = False
        self.handles = [m.register_forward_hook(self._hook(name)) for name, m in model.named_modules()
                        if name and not list(m.children())]
        self.kinds = {name: type(m).__name__ for name, m in model.named_modules()}
        self.relus = {name for name, m in model.named_modules() if isinstance(m, _RELUS)}

    def _hook(self, name: str):
        def hook(module, inputs, output):
            if not self.active or not isinstance(output, torch.Tensor) or not output.is_floating_point():
                return
            out = output.detach().float()
            row = {"mean": out.mean().item(), "std": out.std().item() if out.numel() > 1 else 0.0,
                   "finite": bool(torch.isfinite(out).all())}
            if name in self.relus and out.dim() >= 2:
                unit_dim = 1 if out.dim() in (4, 5) else out.dim() - 1
                per_unit = out.transpose(unit_dim, -1).reshape(-1, out.shape[unit_dim])
                row["dead"] = (per_unit.amax(0) <= 0).float().mean().item()
            self.stats[name] = row
        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def health_run(parts: Parts, steps: int) -> dict:
    """A short run of the recipe's own schedule over ``steps`` steps (progress = step / steps)."""
    parts.reset()
    names = {id(p): n for n, p in parts.model.named_parameters()}
    initial = {n: p.detach().clone() for n, p in parts.model.named_parameters()}
    seen_base = list(parts.base_lrs)
    record: dict = {"loss": [], "grad_norm": [], "layer_grads": {}, "expected_lr": [], "applied_lr": [],
                    "multiplier": [], "nonfinite_grads": {}}
    step_lrs: list = []

    def before_step(optimizer, args, kwargs):  # what the optimizer really uses: grads and LRs at step time
        step_lrs.append([g["lr"] for g in optimizer.param_groups])
        for g in optimizer.param_groups:
            for p in g["params"]:
                if not p.requires_grad:  # frozen (a fine-tuning stage): not expected to have a gradient
                    continue
                name = names.get(id(p), "?")
                if p.grad is None:
                    norm = 0.0
                else:
                    norm = p.grad.detach().float().norm().item()
                    if not math.isfinite(norm):
                        record["nonfinite_grads"][name] = record["nonfinite_grads"].get(name, 0) + 1
                record["layer_grads"].setdefault(name, []).append(norm)

    handle = parts.optimizer.register_step_pre_hook(before_step)
    probe = _ActivationProbe(parts.model)
    activations: dict = {}
    try:
        for i in range(steps):
            progress = i / steps
            if parts.on_step is not None:
                parts.on_step(progress, i)
            mult = parts.update_hparams(parts.optimizer, progress, i)
            while len(seen_base) < len(parts.optimizer.param_groups):
                seen_base.append(parts.optimizer.param_groups[len(seen_base)]["lr"])
            expected = [g.get("base_lr", seen_base[j]) * mult if isinstance(mult, (int, float)) else float("nan")
                        for j, g in enumerate(parts.optimizer.param_groups)]
            probe.active = i in (0, steps - 1)
            loss, grad_norm = parts.step()
            if probe.active:
                activations["first" if i == 0 else "last"] = dict(probe.stats)
                probe.stats = {}
            record["loss"].append(_finite(loss))
            record["grad_norm"].append(_finite(grad_norm))
            record["expected_lr"].append(expected)
            record["applied_lr"].append(step_lrs[-1] if step_lrs else [float("nan")] * len(expected))
            record["multiplier"].append(mult if isinstance(mult, (int, float)) else None)
            if not math.isfinite(loss):
                break
    finally:
        handle.remove()
        probe.close()
    record["activations"] = activations
    record["kinds"] = probe.kinds
    record["no_grad"] = [n for n, norms in record["layer_grads"].items() if norms and max(norms) == 0.0]
    record["weight_change"] = relative_weight_change(parts.model, initial)
    parts.reset()
    return record


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


# ---- data -----------------------------------------------------------------------------------------------

def as_numpy(x):
    """A tensor, array, frame or sequence as something row-indexable (frames stay frames)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if hasattr(x, "iloc") or isinstance(x, np.ndarray):
        return x
    if isinstance(x, (list, tuple)):
        return list(x)
    return np.asarray(x)


def row_hashes(x) -> list[str]:
    """A content hash per row (an image, a table row, a string): equal rows, equal hashes."""
    x = as_numpy(x)
    if hasattr(x, "iloc"):
        import pandas as pd

        return [str(h) for h in pd.util.hash_pandas_object(x, index=False).to_numpy()]
    if isinstance(x, list):
        return [hashlib.blake2b(str(r).encode(), digest_size=12).hexdigest() for r in x]
    x = np.ascontiguousarray(x)
    flat = x.reshape(len(x), -1)
    return [hashlib.blake2b(r.tobytes(), digest_size=12).hexdigest() for r in flat]


def nonfinite_rows(x) -> np.ndarray:
    """Indices of rows holding NaN or inf (numeric inputs only; others have none)."""
    x = as_numpy(x)
    if hasattr(x, "iloc"):
        x = x.select_dtypes("number").to_numpy(dtype=float)
    if isinstance(x, list) or not np.issubdtype(np.asarray(x).dtype, np.floating):
        return np.zeros(0, dtype=int)
    flat = np.asarray(x).reshape(len(x), -1)
    return np.flatnonzero(~np.isfinite(flat).all(1))


def feature_stats(x, max_features: int = 64, max_rows: int = 4096) -> list[dict]:
    """Mean, std, min, max per channel (images: axis 1) or per column (tables), over at most ``max_rows``
    evenly spaced rows (a large image set would not fit in memory as float64)."""
    x = as_numpy(x)
    if not isinstance(x, list) and len(x) > max_rows:
        rows = np.linspace(0, len(x) - 1, max_rows).astype(int)
        x = x.iloc[rows] if hasattr(x, "iloc") else x[rows]
    if hasattr(x, "iloc"):
        cols = list(x.select_dtypes("number").columns)[:max_features]
        return [{"feature": str(c), "mean": float(np.nanmean(v)), "std": float(np.nanstd(v)),
                 "min": float(np.nanmin(v)), "max": float(np.nanmax(v))}
                for c in cols for v in [x[c].to_numpy(dtype=float)]]
    if isinstance(x, list) or not np.issubdtype(np.asarray(x).dtype, np.number):
        return []
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    per = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1) if x.ndim > 2 else x.T
    return [{"feature": str(i), "mean": float(np.nanmean(v)), "std": float(np.nanstd(v)),
             "min": float(np.nanmin(v)), "max": float(np.nanmax(v))} for i, v in enumerate(per[:max_features])]
