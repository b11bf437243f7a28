"""Device choice, mixed precision, TF32 and torch.compile with a clean fallback."""
from __future__ import annotations

import contextlib
import logging

import torch

from recipe_zoo.core.errors import ZooError

log = logging.getLogger(__name__)


def choose_device(preference: str = "auto") -> torch.device:
    """``auto`` picks cuda, then mps, then cpu; an explicit name must be available. Under torchrun,
    ``cuda`` is this process's own GPU (cuda:LOCAL_RANK)."""
    from recipe_zoo.core.distributed import device_for_rank

    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    if preference == "auto":
        if torch.cuda.is_available():
            return device_for_rank(torch.device("cuda"))
        if mps:
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(preference)
    except RuntimeError:
        raise ZooError(f"--device {preference}: not a device (auto, cpu, cuda, cuda:N, mps)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ZooError(f"--device {preference}: CUDA is not available here (torch {torch.__version__}); use --device "
                       "cpu or auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ZooError(f"--device {preference}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not mps:
        raise ZooError(f"--device {preference}: MPS (Apple GPU) is not available here; use --device cpu or auto")
    if device.type not in ("cpu", "cuda", "mps"):
        raise ZooError(f"--device {preference}: the zoo trains on cpu, cuda or mps")
    return device_for_rank(device)


def resolve_precision(device: torch.device, precision: str = "auto") -> str:
    """``auto``: bf16 on GPUs that have it, fp16 (+GradScaler) on older GPUs, fp32 on CPU.

    bf16 on a CPU without bf16 units is slower than fp32, so CPUs only get it when asked.
    """
    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise ValueError(f"precision must be auto, fp32, bf16 or fp16, not {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


def autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """fp16 needs loss scaling; bf16 and fp32 do not (the scaler is then a no-op)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def speed_switches(device: torch.device, deterministic: bool = False) -> None:
    """TF32 matmuls, cuDNN autotuning for fixed shapes, denormals flushed to zero on CPU (tiny
    gradients otherwise fall into slow denormal arithmetic); deterministic algorithms when asked."""
    torch.set_float32_matmul_precision("high")
    if device.type == "cpu":
        torch.set_flush_denormal(True)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = not deterministic
        torch.backends.cudnn.deterministic = deterministic
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def maybe_compile(model: torch.nn.Module, enabled: bool) -> torch.nn.Module:
    """``torch.compile(dynamic=False)``; graphs that fail to compile fall back to eager."""
    if not enabled:
        return model
    try:
        import torch._dynamo
        torch._dynamo.config.suppress_errors = True  # fall back to eager per frame on errors
        return torch.compile(model, dynamic=False)
    except Exception as exc:  # compile unsupported on this platform/python
        log.warning("torch.compile unavailable (%s); running eager", exc)
        return model


def enable_activation_checkpointing(model: torch.nn.Module, attr: str = "blocks") -> int:
    """Recompute each block's activations in backward; the model must expose ``model.<attr>``."""
    from torch.utils.checkpoint import checkpoint

    blocks = getattr(model, attr, None)
    if blocks is None:
        raise ValueError(f"activation checkpointing needs the model to expose .{attr}")
    for block in blocks:
        forward = block.forward
        block.forward = lambda *a, _f=forward, **k: checkpoint(_f, *a, use_reentrant=False, **k)
    return len(blocks)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (all devices) right after start-up."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
