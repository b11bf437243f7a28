"""Optimizers: AdamW with the recipe defaults, SGD-Nesterov, Muon, and a hybrid Muon+AdamW.

Parameter groups are explicit dicts that carry their ``kind`` (matrix / embedding / head / scalar)
and the optimizer that serves them (``"muon"`` or ``"adamw"``). ``split_param_groups`` asserts that
every trainable parameter lands in exactly one group, so a parameter can never be silently dropped.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from recipe_zoo.core.distributed import is_dtensor

ADAMW_BETAS = (0.9, 0.95)  # LLM-style betas; 0.999 reacts too slowly to loss spikes
ADAMW_EPS = 1e-10  # 1e-8 can leave bf16 updates stale

PARAM_KINDS = ("matrix", "embedding", "head", "scalar")


# ---------------------------------------------------------------------------------------------
# Splitting a model into parameter groups
# ---------------------------------------------------------------------------------------------

def split_param_groups(model: nn.Module, head: Iterable[str] = ()) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """Split trainable parameters into matrices / embeddings / head / scalars.

    - embedding: weights of ``nn.Embedding`` modules;
    - head: parameters of the modules named in ``head`` (e.g. ``["fc"]``, ``["lm_head"]``);
    - scalar: anything with fewer than 2 dims (biases, norm gains, per-layer scalars);
    - matrix: every other weight with 2 or more dims (linear and conv filters).
    """
    head_prefixes = tuple(h.rstrip(".") + "." for h in head)
    embedding_params = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {k: [] for k in PARAM_KINDS}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if name.startswith(head_prefixes):
            kind = "head"
        elif id(p) in embedding_params:
            kind = "embedding"
        elif p.ndim < 2:
            kind = "scalar"
        else:
            kind = "matrix"
        groups[kind].append((name, p))
    if head_prefixes and not groups["head"]:
        raise ValueError(f"no parameter matches head modules {list(head)}")
    assert_covers(model, [[p for _, p in ps] for ps in groups.values()])
    return groups


def assert_covers(model: nn.Module, param_lists: Iterable[Iterable[torch.Tensor]]) -> None:
    """Every trainable parameter of ``model`` is in exactly one list, and nothing from elsewhere is
    (frozen parameters may be listed: fine-tuning stages unfreeze them later)."""
    seen: dict[int, int] = {}
    for params in param_lists:
        for p in params:
            seen[id(p)] = seen.get(id(p), 0) + 1
    names = {id(p): n for n, p in model.named_parameters()}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in seen]
    twice = [names.get(i, "?") for i, c in seen.items() if c > 1]
    foreign = [i for i in seen if i not in names]
    if missing or twice or foreign:
        raise AssertionError(f"parameter groups do not cover the model exactly: missing={missing} "
                             f"duplicated={twice} not-in-model={len(foreign)}")


def width_lr_scale(d_model: int, reference: int = 768) -> float:
    """AdamW LR scale for width: (d/768)^-0.5 (nanochat's rule for embeddings, head, scalars)."""
    return (d_model / reference) ** -0.5


def batch_lr_scale(batch_size: int, reference_batch: int) -> float:
    """Square-root rule: doubling the batch multiplies the LR by about sqrt(2)."""
    return math.sqrt(batch_size / reference_batch)


def layer_decay(depth: dict[str, int], decay: float, top: int | None = None) -> dict[str, float]:
    """Layer-wise LR decay for fine-tuning: the LR multiplier ``decay ** (top - depth)`` of each parameter name
    (depth 0 at the input; ``top`` defaults to the deepest given), so the layers nearest the output move most."""
    top = max(depth.values(), default=0) if top is None else top
    return {name: decay ** (top - d) for name, d in depth.items()}


def no_decay(name: str, p: torch.Tensor) -> bool:
    """Biases, norm gains and other scalars/vectors are never weight-decayed."""
    return p.ndim < 2 or name.endswith(".bias")


# ---------------------------------------------------------------------------------------------
# Plain optimizers
# ---------------------------------------------------------------------------------------------

def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weights with decay, and biases/norms/embeddings without."""
    embedding_params = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, skip = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (skip if no_decay(name, p) or id(p) in embedding_params else decay).append(p)
    return [g for g in ({"params": decay, "weight_decay": weight_decay},
                        {"params": skip, "weight_decay": 0.0}) if g["params"]]


def adamw(groups: list[dict], lr: float, betas=ADAMW_BETAS, eps=ADAMW_EPS) -> torch.optim.AdamW:
    """AdamW with the recipe defaults over explicit groups (each may set its own lr/weight_decay)."""
    fused = all(p.is_cuda for g in groups for p in g["params"])
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)


def sgd_nesterov(groups: list[dict], lr: float, momentum: float = 0.9) -> torch.optim.SGD:
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=True)


# ---------------------------------------------------------------------------------------------
# Muon
# ---------------------------------------------------------------------------------------------

# Per-iteration (a, b, c) of the quintic p(x) = a x + b x^3 + c x^5, from "The Polar Express"
# (Amsel et al. 2025): each step is minimax-optimal on the remaining singular-value interval,
# so five steps bring singular values in [1e-3, 1] close to 1.
POLAR_EXPRESS_COEFFS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


MUON_BATCH_ELEMENTS = 2**26  # matrices of one shape are orthogonalised together, up to this many elements a batch


def orthogonalize(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Approximate U V^T of the SVD of ``g`` (..., rows, cols) by Newton-Schulz iterations."""
    # fp32 on a CPU even for a bf16 run (bf16 iterations dropped: docs/LOG.md#2026-12-04-muon-fp32-on-cpu)
    x = g.bfloat16() if g.is_cuda else g.float()
    transposed = x.size(-2) > x.size(-1)
    if transposed:  # iterate on the wide orientation: X X^T is the smaller Gram matrix
        x = x.mT
    # Safety factor 1.02 keeps the top singular value below 1 despite rounding.
    x = x / (x.norm(dim=(-2, -1), keepdim=True) * 1.02 + 1e-7)
    for a, b, c in POLAR_EXPRESS_COEFFS[:steps]:
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    if transposed:
        x = x.mT
    return x.to(g.dtype)


def muon_update(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum: float, ns_steps: int = 5) -> torch.Tensor:
    """Nesterov momentum, then orthogonalise; conv filters are flattened to (out, in*k*k)."""
    update = _nesterov(grad, momentum_buffer, momentum)
    if is_dtensor(update):  # an FSDP2 shard: orthogonalise the whole matrix, keep this rank's rows
        from torch.distributed.tensor import distribute_tensor

        whole = _orthogonal_steps([update.full_tensor()], ns_steps)[0]
        return distribute_tensor(whole, update.device_mesh, update.placements, src_data_rank=None)
    return _orthogonal_steps([update], ns_steps)[0]


def _nesterov(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum: float) -> torch.Tensor:
    momentum_buffer.lerp_(grad, 1 - momentum)
    return grad.lerp(momentum_buffer, momentum)


def _orthogonal_steps(updates: list[torch.Tensor], ns_steps: int) -> list[torch.Tensor]:
    """Orthogonalise matrices of one shape as one batch: each Newton-Schulz iteration is then three batched
    matmuls for the whole stack instead of three per matrix (on a GPU the per-matrix launches dominate
    small models' optimizer time). Each matrix's result is the one it gets alone."""
    shape = updates[0].shape
    flat = [u.reshape(shape[0], -1) for u in updates]
    rows, cols = flat[0].shape
    out = orthogonalize(torch.stack(flat) if len(flat) > 1 else flat[0].unsqueeze(0), ns_steps)
    out = out * max(1.0, rows / cols) ** 0.5  # shape-aware LR: tall matrices get a larger step
    return [o.reshape(shape) for o in out.unbind(0)]


class MuonAdamW(torch.optim.Optimizer):
    """One optimizer over groups that say which rule serves them.

    A group is ``{"params": [...], "kind": "matrix", "optimizer": "muon", "lr": .., "weight_decay": ..,
    "momentum": ..}`` or ``{..., "optimizer": "adamw", "betas": .., "eps": ..}``. Muon weight decay is
    cautious: it only shrinks coordinates where the update and the parameter agree in sign.
    """

    def __init__(self, groups: list[dict], ns_steps: int = 5):
        for g in groups:
            if g.get("optimizer") not in ("muon", "adamw"):
                raise ValueError(f"group of kind {g.get('kind')!r} must say optimizer='muon' or 'adamw'")
            if g["optimizer"] == "muon" and any(p.ndim < 2 for p in g["params"]):
                raise ValueError("Muon serves matrices only (ndim >= 2); put vectors in an AdamW group")
        defaults = dict(lr=1e-3, weight_decay=0.0, momentum=0.95, betas=ADAMW_BETAS, eps=ADAMW_EPS,
                        kind="matrix", ns_steps=ns_steps)
        super().__init__(groups, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["optimizer"] == "muon":
                self._muon_step(group)
            else:
                self._adamw_step(group)
        return loss

    def _muon_step(self, group: dict) -> None:
        lr, wd = group["lr"], group["weight_decay"]
        by_shape: dict[tuple, list[tuple[nn.Parameter, torch.Tensor]]] = {}
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            if is_dtensor(p.grad):  # FSDP2 shards gather their whole matrix one at a time
                self._apply_muon(p, muon_update(p.grad, state["momentum_buffer"], group["momentum"],
                                                group["ns_steps"]), lr, wd)
                continue
            update = _nesterov(p.grad, state["momentum_buffer"], group["momentum"])
            by_shape.setdefault((tuple(p.shape), p.dtype, p.device), []).append((p, update))
        for pairs in by_shape.values():
            per_batch = max(1, MUON_BATCH_ELEMENTS // pairs[0][0].numel())  # bounds the stack's extra memory
            for i in range(0, len(pairs), per_batch):
                chunk = pairs[i:i + per_batch]
                for (p, _), update in zip(chunk, _orthogonal_steps([u for _, u in chunk], group["ns_steps"])):
                    self._apply_muon(p, update, lr, wd)

    @staticmethod
    def _apply_muon(p: torch.Tensor, update: torch.Tensor, lr: float, wd: float) -> None:
        if wd:  # cautious: shrink only where the update and the parameter agree in sign
            mask = (update * p) > 0
            p.sub_(p * mask, alpha=lr * wd)
        p.sub_(update, alpha=lr)

    def _adamw_step(self, group: dict) -> None:
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
            t = state["step"].item()
            p.mul_(1 - lr * wd)
            state["exp_avg"].lerp_(p.grad, 1 - beta1)
            state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            bias1 = 1 - beta1 ** t
            bias2_sqrt = math.sqrt(1 - beta2 ** t)
            denom = (state["exp_avg_sq"].sqrt() / bias2_sqrt).add_(eps)
            p.addcdiv_(state["exp_avg"], denom, value=-lr / bias1)


def hybrid_groups(model: nn.Module, *, head: Iterable[str], matrix_lr: float, embedding_lr: float,
                  head_lr: float, scalar_lr: float, matrix_wd: float = 0.0, adamw_wd: float = 0.0,
                  betas=ADAMW_BETAS, eps=ADAMW_EPS) -> list[dict]:
    """The recipe table's groups: Muon for hidden matrices, AdamW (no decay) for the rest."""
    split = split_param_groups(model, head=head)
    lrs = {"embedding": embedding_lr, "head": head_lr, "scalar": scalar_lr}
    groups = []
    if split["matrix"]:
        groups.append({"params": [p for _, p in split["matrix"]], "kind": "matrix", "optimizer": "muon",
                       "lr": matrix_lr, "weight_decay": matrix_wd, "momentum": 0.95})
    for kind, lr in lrs.items():
        if split[kind]:
            wd = adamw_wd if kind == "head" else 0.0
            groups.append({"params": [p for _, p in split[kind]], "kind": kind, "optimizer": "adamw",
                           "lr": lr, "weight_decay": wd, "betas": betas, "eps": eps})
    return groups
