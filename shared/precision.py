"""Device choice, mixed precision, TF32 and torch.compile with a clean fallback; torch's global switches kept for
a caller (``torch_state_kept``)."""
from __future__ import annotations

import contextlib
import logging
import os

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


CPU_BF16_SPEEDUP = 1.3  # a CPU's bf16 matmul must beat its fp32 one by this much for precision=auto to use bf16


def resolve_precision(device: torch.device, precision: str = "auto", cpu_choice: str = "fp32") -> str:
    """``auto``: bf16 on GPUs that have it, fp16 (+GradScaler) on older GPUs; on a CPU the recipe's ``cpu_choice``
    (``RecipeSpec.cpu_precision``: bf16 where its step was measured at least 1.3x faster in bf16 with validation
    no worse, else fp32), and bf16 only where this CPU's bf16 matmul measures at least 1.3x its fp32 one (bf16
    units: AVX-512 BF16, AMX; without them bf16 is emulated and slower). An explicit precision is kept as given.
    """
    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise ValueError(f"precision must be auto, fp32, bf16 or fp16, not {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu" and cpu_choice == "bf16":
        return "bf16" if cpu_computes_bf16() else "fp32"
    return "fp32"


def cpu_computes_bf16() -> bool:
    """This CPU's flags list bf16 units and its bf16 matmul measures at least 1.3x its fp32 one (a bounded measure,
    cached): ``flops.cpu_bf16_speedup``. Without the flags nothing is measured."""
    from recipe_zoo.core.flops import cpu_bf16_speedup

    speedup = cpu_bf16_speedup()
    return speedup is not None and speedup >= CPU_BF16_SPEEDUP


def autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """fp16 needs loss scaling; bf16 and fp32 do not (the scaler is then a no-op)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def speed_switches(device: torch.device, deterministic: bool = False, tf32: bool = True) -> None:
    """TF32 matmuls and convolutions (``tf32``: on CPUs ``high`` also lets oneDNN reduce fp32 matmuls; off: full
    fp32 everywhere), cuDNN autotuning for fixed shapes, denormals flushed to zero on CPU (tiny gradients otherwise
    fall into slow denormal arithmetic); deterministic algorithms when asked."""
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    if device.type == "cpu":
        torch.set_flush_denormal(True)
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = tf32
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


# ---------------------------------------------------------------------------------------------
# torch's process-wide state: what a run sets (speed_switches, maybe_compile, the seeds) and a caller gets back
# ---------------------------------------------------------------------------------------------

def _flushes_denormals() -> bool:
    return bool(torch.tensor([1e-323], dtype=torch.float64)[0] == 0)  # torch has no getter: a denormal reads as 0


def _dynamo_config():
    import sys

    return sys.modules.get("torch._dynamo.config")  # only once loaded: importing it costs about a second


def _dynamo_suppresses_errors() -> bool:
    config = _dynamo_config()
    if config is None:  # not loaded yet: the value torch's config module starts with (torch/_dynamo/config.py)
        return bool(os.environ.get("TORCHDYNAMO_SUPPRESS_ERRORS", False))
    return bool(config.suppress_errors)


def _set_dynamo_suppress_errors(value: bool) -> None:
    config = _dynamo_config()
    if config is not None:
        config.suppress_errors = value


def _deterministic() -> tuple[bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


def _set_deterministic(value: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


def _attribute(owner, name: str) -> tuple:
    return (lambda: getattr(owner, name)), (lambda value: setattr(owner, name, value))


def _autocast(kind: str) -> tuple:
    return (lambda: torch.is_autocast_enabled(kind)), (lambda value: torch.set_autocast_enabled(kind, value))


def _switches() -> dict:
    """name: (getter, setter) of each process-wide switch; the thread-local autocast and grad mode are the
    calling thread's."""
    cudnn = {f"cudnn.{flag}": _attribute(torch.backends.cudnn, flag)
             for flag in ("benchmark", "deterministic", "allow_tf32", "enabled")}
    return {
        "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "flush_denormal": (_flushes_denormals, torch.set_flush_denormal),
        "dynamo.suppress_errors": (_dynamo_suppresses_errors, _set_dynamo_suppress_errors),
        "num_threads": (torch.get_num_threads, torch.set_num_threads),
        "default_dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "deterministic_algorithms": (_deterministic, _set_deterministic),
        **cudnn,
        **{f"autocast.{kind}": _autocast(kind) for kind in ("cpu", "cuda")},
        "grad_enabled": (torch.is_grad_enabled, torch.set_grad_enabled),
    }


def global_switches() -> dict:
    """torch's global switches as they are now: name -> value (compare two, or give one to set_global_switches)."""
    return {name: get() for name, (get, _) in _switches().items()}


def set_global_switches(values: dict) -> None:
    """Set each switch named in ``values`` (a global_switches dict) back to its value, touching only those that
    differ."""
    for name, (get, set_) in _switches().items():
        if name in values and get() != values[name]:
            set_(values[name])


def rng_states() -> dict:
    """The global generators: Python's, numpy's, torch's CPU one and, once CUDA is initialised, each GPU's."""
    import random

    import numpy as np

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return {"random": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(), "cuda": cuda}


def set_rng_states(states: dict) -> None:
    import random

    import numpy as np

    random.setstate(states["random"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states["cuda"] is not None:
        torch.cuda.set_rng_state_all(states["cuda"])


@contextlib.contextmanager
def torch_state_kept():
    """Inside, a run may set torch's switches and seed its generators as it needs; on leaving, the caller's are
    back (``recipe_zoo.cli.main`` called from Python, a notebook or a test, then finds its torch as it left it)."""
    switches, rngs = global_switches(), rng_states()
    try:
        yield
    finally:
        set_global_switches(switches)
        set_rng_states(rngs)
