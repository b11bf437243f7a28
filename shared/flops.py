"""FLOPs per step (counted once by torch's FLOP counter) and MFU against the device's peak."""
from __future__ import annotations

import contextlib
import json
import os
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


def gpu_peak_flops(name: str) -> float | None:
    for key, tflops in GPU_PEAK_TFLOPS.items():  # first match wins: specific names come first
        if key in name:
            return tflops * 1e12
    return None


def computed_cache_root() -> Path:
    """``$ZOO_CACHE``, else ``~/.cache/zoo`` (``$XDG_CACHE_HOME`` honoured): where what is computed once and keyed by
    its inputs is kept (this CPU peak, the fid_zoo feature network), so several processes, or a test session's
    tests, can share one folder."""
    if os.environ.get("ZOO_CACHE"):
        return Path(os.environ["ZOO_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo"


def cpu_peak_flops(cache_dir: Path | None = None) -> float:
    """fp32 matmul throughput measured once per CPU model and thread count, then cached.

    A practical peak, not the datasheet's: MFU on CPUs says how close a step runs to what this CPU
    reaches on its best-tuned kernel (convolutions through oneDNN can come close to it)."""
    from recipe_zoo.core.envinfo import cpu_model

    threads = torch.get_num_threads()
    key = f"{cpu_model()}|{threads} threads|fp32 matmul 2048"
    cache = (cache_dir or computed_cache_root()) / "cpu_peak.json"
    try:
        table = json.loads(cache.read_text())
    except (OSError, ValueError):
        table = {}
    if key in table:
        cached = float(table[key])
        # A figure measured while the CPU was busy is too low, and the sizing that reads it (llm depth, medical
        # batch, diffusion width) follows it: a quick check on a smaller product (~30 ms) that beats it by
        # 20% means the cache was measured under load, and the full measure runs again.
        if _measure_matmul_flops(n=1024, trials=1) < 1.2 * cached:
            return cached
        peak = max(cached, _measure_matmul_flops())
    else:
        peak = _measure_matmul_flops()
    table[key] = peak
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")  # processes of one job may write at once
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, cache)
    except OSError:
        pass  # read-only home: measure again next time
    return peak


def _measure_matmul_flops(n: int = 2048, trials: int = 4) -> float:
    """Best of several timed matmuls: a busy neighbour can only make a trial slower, never faster."""
    g = torch.Generator().manual_seed(0)  # never draw from the global RNG: training reproducibility
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    a @ b  # warm up
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def peak_flops(device: torch.device) -> float | None:
    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device))
    if device.type == "cpu":
        return cpu_peak_flops()
    return None


def peak_label(device: torch.device, peak: float) -> str:
    """What MFU is a percentage of on ``device``, for the summary. On a CPU the peak is one fp32 matmul measured
    here, not a datasheet's, and oneDNN's convolutions can run past it (vision/resnet measured 101%): a conv net's
    CPU MFU is its model FLOP/s relative to that matmul. ``peak``: ``peak_flops(device)``."""
    if device.type == "cuda":
        return f"{peak / 1e12:.1f} TFLOP/s, dense bf16 from the {torch.cuda.get_device_name(device)} datasheet"
    return f"{peak / 1e9:.0f} GFLOP/s, an fp32 2048x2048 matmul measured on this CPU (convolutions can exceed it)"


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
