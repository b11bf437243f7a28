"""FLOPs per step (counted once by torch's FLOP counter) and MFU against the device's peak."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch

# Dense bf16 tensor-core peaks in TFLOP/s (vendor datasheets, no sparsity).
GPU_PEAK_TFLOPS = {
    "H200": 989.5, "H100 SXM": 989.5, "H100 80GB HBM3": 989.5, "H100 PCIe": 756.0, "H100": 989.5,
    "A100": 312.0, "A10G": 70.0, "A10": 125.0, "L40S": 362.0, "L4": 121.0,
    "RTX 4090": 165.0, "RTX 3090": 71.0, "V100": 125.0, "T4": 65.0,
}


# Plain fp32 (no tensor cores) in TFLOP/s, same datasheets: what a run with TF32 off (tf32=false) computes at best.
GPU_FP32_TFLOPS = {
    "H200": 67.0, "H100 SXM": 67.0, "H100 80GB HBM3": 67.0, "H100 PCIe": 51.0, "H100": 67.0,
    "A100": 19.5, "A10G": 31.2, "A10": 31.2, "L40S": 91.6, "L4": 30.3,
    "RTX 4090": 82.6, "RTX 3090": 35.6, "V100": 15.7, "T4": 8.1,
}


def gpu_peak_flops(name: str, dtype: str = "bf16") -> float | None:
    """The datasheet's dense figure for ``dtype``: "bf16" (fp16 too), "tf32" (half the bf16 figure on the tensor
    cores of every part listed with bf16) or "fp32" (plain fp32)."""
    table = GPU_FP32_TFLOPS if dtype == "fp32" else GPU_PEAK_TFLOPS
    for key, tflops in table.items():  # first match wins: specific names come first
        if key in name:
            return tflops * 1e12 / (2 if dtype == "tf32" else 1)
    return None


def gpu_matmul_dtype(precision: str) -> str:
    """What a GPU run's matmuls compute in: bf16/fp16 under autocast, else TF32 or plain fp32 by the process's
    float32 matmul precision (the loop's ``tf32`` setting)."""
    if precision in ("bf16", "fp16"):
        return "bf16"
    return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def computed_cache_root() -> Path:
    """``$ZOO_CACHE``, else ``~/.cache/zoo`` (``$XDG_CACHE_HOME`` honoured): where what is computed once and keyed by
    its inputs is kept (this CPU peak, the fid_zoo feature network), so several processes, or a test session's
    tests, can share one folder."""
    if os.environ.get("ZOO_CACHE"):
        return Path(os.environ["ZOO_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo"


_CHECKED: set[tuple[str, str, float]] = set()  # (cache file, key, figure) this process has checked or measured

# Flags of bf16 units: x86's AVX-512 BF16 and AMX, ARM's FEAT_BF16 and SME. Without one of them torch computes bf16
# by converting to fp32 in software, far slower than fp32, so it is never measured at 2048x2048 there
# (docs/LOG.md#2026-12-07-bf16-emulated-without-bf16-units).
BF16_UNIT_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16", "sme"})
ISA_LIMITS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")  # what caps the kernels torch picks
_SPEEDUPS: dict[tuple[str, str], float] = {}  # (cache file, key): bf16 over fp32, as measured or read here
ANNOUNCE_SECONDS = 2.0  # a measurement expected to take longer says what it does and for how long, in one line


def peak_key(what: str) -> str:
    """The cache key of a figure measured on this CPU: its full identity (model name, family, model, stepping,
    threads, as the board names it) and any variable that caps the kernels torch picks, then what was measured."""
    from recipe_zoo.core.envinfo import cpu_identity

    limits = "".join(f" {v}={os.environ[v]}" for v in ISA_LIMITS if os.environ.get(v))
    return f"{cpu_identity()}{limits}|{what}"


def _read_cache(cache: Path) -> dict:
    try:
        table = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def _write_cache(cache: Path, key: str, value: float) -> None:
    table = _read_cache(cache)  # read again: another process may have added its figure meanwhile
    table[key] = value
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")  # processes of one job may write at once
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, cache)
    except OSError:
        pass  # read-only home: measure again next time


def cpu_has_bf16_units(cpuinfo: str | None = None) -> bool | None:
    """What the CPU's flags say: True where they list bf16 units, False where they list flags but none of those,
    None where the system lists no flags (macOS, some VMs): the measure decides there."""
    from recipe_zoo.core.envinfo import cpu_flags

    flags = cpu_flags(cpuinfo)
    return bool(flags & BF16_UNIT_FLAGS) if flags else None


def cpu_bf16_speedup(cache_dir: Path | None = None) -> float | None:
    """This CPU's bf16 matmul throughput over its fp32 one, known in well under a second: None where its flags
    show no bf16 units (nothing measured: bf16 is emulated there); else a bounded measure, cached by the CPU's
    identity. A 256x256 bf16 product first (0.1 s where bf16 is emulated, as on a CPU whose flags claim units
    that its kernels are capped below, ``ONEDNN_MAX_CPU_ISA=AVX2``): under half fp32's rate, that ratio; else
    1024x1024 in both dtypes, best of three (~0.1 s where bf16 is native)."""
    if cpu_has_bf16_units() is False:
        return None
    cache = (cache_dir or computed_cache_root()) / "cpu_peak.json"
    key = peak_key("bf16/fp32 matmul 1024")
    if (str(cache), key) in _SPEEDUPS:  # asked several times a run; measured once even where the cache is read-only
        return _SPEEDUPS[str(cache), key]
    table = _read_cache(cache)
    if key in table:
        return _SPEEDUPS.setdefault((str(cache), key), float(table[key]))
    small = _measure_matmul_flops(n=256, trials=1, dtype="bf16") / _measure_matmul_flops(n=256, trials=3)
    ratio = small if small < 0.5 else (_measure_matmul_flops(n=1024, trials=3, dtype="bf16")
                                       / _measure_matmul_flops(n=1024, trials=3))
    _write_cache(cache, key, ratio)
    _SPEEDUPS[str(cache), key] = ratio
    return ratio


def cpu_emulates_bf16() -> bool:
    """bf16 runs no faster than fp32 here (no bf16 units, or kernels capped below them): a bf16 run on this CPU
    is measured against the fp32 peak and labelled as emulating bf16."""
    speedup = cpu_bf16_speedup()
    return speedup is None or speedup < 1.0


def cpu_peak_flops(cache_dir: Path | None = None, dtype: str = "fp32") -> float:
    """``dtype`` ("fp32" or "bf16") matmul throughput measured once per CPU (``peak_key``), then cached.

    A practical peak, not the datasheet's: MFU on CPUs says how close a step runs to what this CPU
    reaches on its best-tuned kernel (convolutions through oneDNN can come close to it). A 2048x2048 product,
    except bf16 on a CPU that emulates it: 256x256 there (docs/LOG.md#2026-12-07-bf16-emulated-without-bf16-units),
    so no measure takes minutes. Sizing a bf16 run reads it; MFU does not
    (``peak_flops``)."""
    n = 256 if dtype == "bf16" and cpu_emulates_bf16() else 2048
    key = peak_key(f"{dtype} matmul {n}" + (" (emulated)" if n == 256 else ""))
    cache = (cache_dir or computed_cache_root()) / "cpu_peak.json"
    table = _read_cache(cache)
    if key in table:
        cached = float(table[key])
        if (str(cache), key, cached) in _CHECKED:  # this process checked this figure already (runs in one process)
            return cached
        # A figure measured while the CPU was busy is too low, and the sizing that reads it (llm depth, medical
        # batch, diffusion width) follows it: a quick check on a smaller product (~30 ms) that beats it by
        # 20% means the cache was measured under load, and the full measure runs again.
        quick = _measure_matmul_flops(n=min(n, 1024), trials=1, dtype=dtype)
        if quick < 1.2 * cached:
            _CHECKED.add((str(cache), key, cached))
            return cached
        peak = max(cached, _timed_measure(n, dtype, quick, cache))
    else:
        peak = _timed_measure(n, dtype, _measure_matmul_flops(n=min(n, 512), trials=1, dtype=dtype), cache)
    _write_cache(cache, key, peak)
    _CHECKED.add((str(cache), key, peak))
    return peak


def _timed_measure(n: int, dtype: str, rate: float, cache: Path, trials: int = 4) -> float:
    """The full measure; one line first where a quick product's ``rate`` says it takes over a couple of seconds."""
    seconds = (trials + 1) * 2 * n**3 / rate
    if seconds > ANNOUNCE_SECONDS:
        print(f"zoo: measuring this CPU's {dtype} matmul peak ({n}x{n}, about {seconds:.0f} s; once per CPU, "
              f"cached in {cache})", file=sys.stderr, flush=True)
    return _measure_matmul_flops(n=n, trials=trials, dtype=dtype)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _measure_matmul_flops(n: int = 2048, trials: int = 4, dtype: str = "fp32") -> float:
    """Best of several timed matmuls: a busy neighbour can only make a trial slower, never faster."""
    g = torch.Generator().manual_seed(0)  # never draw from the global RNG: training reproducibility
    a, b = (torch.randn(n, n, generator=g).to(DTYPES[dtype]) for _ in range(2))
    a @ b  # warm up
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def peak_flops(device: torch.device, precision: str = "fp32") -> float | None:
    """The peak a run computing in ``precision`` is measured against: on a CPU the measured matmul of that dtype
    (fp16, which CPUs run no faster, against fp32's), on a GPU the datasheet's dense figure of the dtype its matmuls
    compute in (bf16, TF32 or plain fp32: ``gpu_matmul_dtype``). bf16 on a CPU that emulates it: fp32's, the
    most its arithmetic can reach there."""
    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device), gpu_matmul_dtype(precision))
    if device.type == "cpu":
        return cpu_peak_flops(dtype="bf16" if precision == "bf16" and not cpu_emulates_bf16() else "fp32")
    return None


def peak_label(device: torch.device, peak: float, precision: str = "fp32") -> str:
    """What MFU is a percentage of on ``device``, for the summary's ``mfu_of``. On a CPU the peak is one matmul of
    the run's dtype measured here, not a datasheet's, and oneDNN's convolutions (Winograd among them) can run past
    it: a conv net's CPU MFU is its model FLOP/s relative to that matmul, and over 100% says so rather than being
    clamped. ``peak``: ``peak_flops(device, precision)``."""
    if device.type == "cuda":
        dtype = {"bf16": "dense bf16", "tf32": "dense TF32", "fp32": "plain fp32 (TF32 off)"}[
            gpu_matmul_dtype(precision)]
        return f"{peak / 1e12:.1f} TFLOP/s, {dtype} from the {torch.cuda.get_device_name(device)} datasheet"
    emulated = precision == "bf16" and cpu_emulates_bf16()
    dtype = "a bf16" if precision == "bf16" and not emulated else "an fp32"
    return (f"{peak / 1e9:.0f} GFLOP/s, {dtype} 2048x2048 matmul measured on this CPU (convolutions can exceed it)"
            + ("; the run computes in emulated bf16 (this CPU has no bf16 units)" if emulated else ""))


@contextlib.contextmanager
def counting_flops():
    """Context manager counting FLOPs of the ops run inside it (forward and backward); yields the counter."""
    from torch.utils.flop_counter import FlopCounterMode

    with warnings.catch_warnings():
        # The counter's global module hooks make torch.compile warn that hooks fire twice; the
        # counter itself counts ops, not hook calls, so the figure is unaffected.
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        with FlopCounterMode(display=False) as counter:
            yield counter
