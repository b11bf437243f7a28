"""The device a run trains on, as sizing sees it: what one optimizer step of given work costs there.

``step seconds = latency + FLOPs per process / (peak x share)``. ``peak`` is measured on a CPU (the fp32 matmul
``flops.cpu_peak_flops`` caches) and the vendor's dense bf16 figure on a GPU (labelled as a datasheet figure).
``share`` is the part of that peak a kind of work reaches, and ``latency`` what a step costs whatever its work
(kernel launches, the loop's Python, synchronisation): both are calibrated from the zoo's own runs, each with its
source, and a recipe's sizing rule (llm's depth, diffusion's width, medical's patch and batch) reads them instead
of a guess of its own. Kinds of work: ``matmul`` (transformers: the share grows with the matrices' width),
``conv`` (convolutional nets: MONAI's U-Nets) and ``diffusers_unet`` (diffusers' UNet2DModel: convolutions with
group norms and attention, which gain nothing from bf16 on a CPU).
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Work:
    """The share of peak one kind of work reached, by matrix width (interpolated in log width, flat past the
    measured ends), and the per-step latency; ``source`` says where the figures come from. ``optimizer``: the
    shares were fitted with the optimizer's own FLOPs (Muon's Newton-Schulz) counted in the work; when False they
    are model FLOPs per second (an MFU), the optimizer's time already inside them."""
    shares: tuple[tuple[int, float], ...]
    latency: float
    source: str
    optimizer: bool = False

    def share(self, width: int | None = None) -> float:
        points = self.shares
        if width is None or len(points) == 1 or width <= points[0][0]:
            return points[0][1]
        for (w0, s0), (w1, s1) in zip(points, points[1:]):
            if width <= w1:
                t = math.log(width / w0) / math.log(w1 / w0)
                return s0 + t * (s1 - s0)
        return points[-1][1]

    def scaled(self, why: str, times: float = 1.0, over: float = 1.0) -> Work:
        """The same work with every share ``times`` a measured speed-up ``over`` another (or a cost), ``why`` in its
        source."""
        return dataclasses.replace(self, shares=tuple((w, s * times / over) for w, s in self.shares),
                                   source=f"{self.source}, {why}")


CPU_WORK = {
    # benchmarks/cpu_plan_check.py on llm/gpt (docs/LOG.md#2026-12-03-cpu-matmul-share-refit). A first run on a machine
    # also compiles from a cold inductor cache inside its budget (not modelled).
    "matmul": Work(((64, 0.33), (192, 0.5)), 0.0, "llm/gpt with torch.compile on 2 CPU cores: 33% of the measured "
                                                  "fp32 matmul peak at width 64, 50-61% at depths 2-4"),
    # medical/unet eager, the median of four benchmarks/cpu_plan_check.py sittings; the step floor (min_steps)
    # scales with the share (docs/LOG.md#2026-12-04-cpu-conv-share-18).
    "conv": Work(((1, 0.18),), 0.0, "medical/unet (MONAI UNet) at width 16 on 2 CPU cores (AMD EPYC family 25 model "
                                    "17), eager: 18% of the measured fp32 matmul peak"),
    # diffusers' UNet2DModel (group norms, attention at the lowest level): diffusion/flow on mnist at widths 8-32,
    # the median of three checks; min_steps scaled with it (docs/LOG.md#2026-12-04-diffusers-unet-share-24).
    "diffusers_unet": Work(((1, 0.24),), 0.0, "diffusion/flow (diffusers UNet2DModel) at widths 8-32 on 2 CPU cores "
                                              "(AMD EPYC family 25 model 17): 24% of the measured fp32 matmul peak"),
}
# A run computing in bf16 (autocast) on a CPU with bf16 units is measured against the bf16 matmul peak, a multiple
# of the fp32 one with AVX-512 BF16; its steps speed up far less than that, since autocast leaves the norms, losses
# and optimizer in fp32 and converts at every layer. Each share is the fp32 one
# scaled by the step speed-up measured at the same work (benchmarks/cpu_precision.py, cpu_plan_check.py) over the
# peaks' ratio there: the bf16 prediction is then exactly as good as the fp32 one.
BF16_SPEEDUP = {  # (bf16 over fp32 steps/s, bf16 over fp32 matmul peak), measured on one CPU
    "matmul": (1.5, 2.2),  # llm/gpt (docs/LOG.md#2026-12-03-cpu-sizing-per-dtype)
    # medical/unet, per patch, the median of four sittings (docs/LOG.md#2026-12-04-cpu-conv-share-18). Only bf16 plans
    # move with it; the default is fp32 on a CPU.
    "conv": (1.55, 2.2),
    # diffusion/flow (docs/LOG.md#2026-12-04-diffusers-unet-share-24)
    "diffusers_unet": (0.55, 2.2),
}
CPU_WORK_BF16 = {kind: work.scaled(f"scaled by the measured bf16 step speed-up {BF16_SPEEDUP[kind][0]:.2f}x over the "
                                    f"bf16/fp32 peak ratio {BF16_SPEEDUP[kind][1]:.2f}x", *BF16_SPEEDUP[kind])
                 for kind, work in CPU_WORK.items()}
# torch.compile on a CPU: each conv share (fp32's and bf16's) times the step speed-up measured at the same work
# (benchmarks/cpu_plan_check.py, compile=false against compile=true: docs/LOG.md#2026-12-04-cpu-compile-speed-up-conv).
# llm/gpt's matmul share was measured compiled already; diffusion is not scaled.
COMPILE_SPEEDUP = {"conv": 1.36}


def _compiled(table: dict) -> dict:
    return {kind: work.scaled(f"scaled by the step speed-up torch.compile measured, {COMPILE_SPEEDUP[kind]:.2f}x",
                              COMPILE_SPEEDUP[kind]) if kind in COMPILE_SPEEDUP else work
            for kind, work in table.items()}


CPU_WORK_COMPILED, CPU_WORK_BF16_COMPILED = _compiled(CPU_WORK), _compiled(CPU_WORK_BF16)
GPU_WORK = {
    # llm/gpt on one GPU, bf16, torch.compile, depths 6, 12 and 32 (docs/LOG.md#2026-12-01-gpu-matmul-share)
    "matmul": Work(((768, 0.20), (2048, 0.40)), 0.040,
                   "llm/gpt on one H200 (torch 2.11, bf16, compiled): depth 6/12/32 steps", optimizer=True),
    # No conv run on a GPU has been large enough to measure its share: 0.3 is the guess the recipes used before,
    # kept and labelled. The latency is the step time of the two recipes that size by it (diffusion/flow and
    # medical/unet), their loops' overhead rather than the device's (docs/LOG.md#2026-12-02-gpu-conv-latency).
    "conv": Work(((1, 0.3),), 0.030, "share: a guess (no large conv run measured on a GPU yet); latency: 28-31 ms "
                                     "steps of diffusion/flow and medical/unet runs on one H200"),
}
GPU_WORK["diffusers_unet"] = GPU_WORK["conv"]  # measured on both together (the latency) or not at all (the share)
GPU_MEMORY_GB = {"H200": 141, "H100": 80, "A100": 80, "A10G": 24, "A10": 24, "L40S": 48, "L4": 24,
                 "RTX 4090": 24, "RTX 3090": 24, "V100": 32, "T4": 16}


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    kind: str  # "cpu" | "cuda"
    peak: float  # FLOP/s of one process's device
    peak_source: str
    memory: float  # bytes free for training, per process
    processes: int = 1
    work: dict = field(default_factory=lambda: dict(CPU_WORK))
    dtype: str = "fp32"  # a CPU's: whose peak and shares these are
    compiled: bool = False  # a CPU's: shares under torch.compile

    def share(self, work: str, width: int | None = None) -> float:
        return self.work[work].share(width)

    def rate(self, work: str, width: int | None = None) -> float:
        """FLOP/s one process reaches on this kind of work."""
        return self.peak * self.share(work, width)

    def counts_optimizer(self, work: str) -> bool:
        return self.work[work].optimizer

    def latency(self, work: str) -> float:
        return self.work[work].latency

    def step_seconds(self, flops: float, work: str, width: int | None = None) -> float:
        """One optimizer step whose work (all processes together) is ``flops``."""
        return self.latency(work) + flops / self.processes / self.rate(work, width)

    def steps(self, seconds: float, flops: float, work: str, width: int | None = None) -> float:
        return seconds / self.step_seconds(flops, work, width)

    def describe(self, work: str = "matmul") -> str:
        procs = f" x {self.processes} processes" if self.processes > 1 else ""
        w = self.work[work]
        shares = ", ".join(f"{s:.0%}" + (f" at width {wd}" if len(w.shares) > 1 else "") for wd, s in w.shares)
        peak = f"{self.peak / 1e12:,.1f} TFLOP/s" if self.peak >= 1e12 else f"{self.peak / 1e9:,.0f} GFLOP/s"
        return (f"{self.name}{procs}: peak {peak} ({self.peak_source}), {work} reaches "
                f"{shares}, {w.latency * 1e3:.0f} ms a step of latency; {self.memory / 2**30:.0f} GiB free")


def free_memory(device: torch.device) -> float:
    """Bytes free now: the accelerator's, or the machine's available RAM."""
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def cpu(peak: float | None = None, processes: int = 1, memory: float | None = None,
        precision: str = "fp32", compiled: bool = False) -> DeviceProfile:
    """This machine's CPU (its measured peak), or a CPU of a stated peak (tests, plans for another machine), for a
    run computing in ``precision``: bf16 against the bf16 matmul peak with its own shares, anything else fp32's
    (``compiled``: either scaled by torch.compile's speed-up)."""
    from recipe_zoo.core.envinfo import cpu_model
    from recipe_zoo.core.flops import cpu_emulates_bf16, cpu_peak_flops

    dtype = "bf16" if precision == "bf16" else "fp32"
    measured = peak is None
    how = ("bf16 matmul 256, emulated: this CPU has no bf16 units" if dtype == "bf16" and cpu_emulates_bf16()
           else f"{dtype} matmul 2048") if measured else ""
    return DeviceProfile(f"CPU {cpu_model()} ({torch.get_num_threads()} threads)" if measured else "CPU",
                         "cpu", cpu_peak_flops(dtype=dtype) if measured else peak,
                         f"measured: {how}" if measured else f"given ({dtype})",
                         free_memory(torch.device("cpu")) / processes if memory is None else memory, processes,
                         cpu_work(dtype, compiled), dtype, bool(compiled))


def cpu_work(dtype: str, compiled: bool) -> dict:
    return dict((CPU_WORK_BF16_COMPILED if compiled else CPU_WORK_BF16) if dtype == "bf16" else
                CPU_WORK_COMPILED if compiled else CPU_WORK)


def with_compile(profile: DeviceProfile, compiled: bool) -> DeviceProfile:
    """The same profile for a run compiled or not (a CPU's shares change with it; a GPU's do not)."""
    if profile.kind != "cpu" or profile.compiled == compiled:
        return profile
    return dataclasses.replace(profile, work=cpu_work(profile.dtype, compiled), compiled=compiled)


def gpu(name: str, processes: int = 1, memory: float | None = None) -> DeviceProfile | None:
    """A GPU by name (a datasheet peak); None when the name is not in the peak table."""
    from recipe_zoo.core.flops import gpu_peak_flops

    peak = gpu_peak_flops(name)
    if peak is None:
        return None
    if memory is None:
        gb = next((v for k, v in GPU_MEMORY_GB.items() if k in name), 24)
        memory = gb * 1e9
    return DeviceProfile(name, "cuda", peak, "datasheet dense bf16", memory, processes, dict(GPU_WORK))


def for_device(device: torch.device, processes: int = 1, precision: str = "fp32",
               compiled: bool = False) -> DeviceProfile:
    """The profile of the device this process trains on, computing in ``precision`` (a CPU's peak and shares are
    those of its dtype, and of torch.compile when ``compiled``; a GPU's are bf16's); an accelerator missing from the
    peak table gets the H200's shares against a 100 TFLOP/s peak, said in the name."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        found = gpu(name, processes, free_memory(device))
        if found is not None:
            return found
        return DeviceProfile(f"{name} (peak unknown: 100 TFLOP/s assumed)", "cuda", 1e14, "assumed",
                             free_memory(device), processes, dict(GPU_WORK))
    if device.type == "cpu":
        return cpu(processes=processes, precision=precision, compiled=compiled)
    return DeviceProfile(f"{device} (peak unknown: 100 GFLOP/s assumed)", device.type, 1e11, "assumed",
                         free_memory(torch.device("cpu")), processes, dict(CPU_WORK))


def named(name: str, processes: int = 1, precision: str = "fp32", compiled: bool = False) -> DeviceProfile | None:
    """``zoo plan``'s device: ``cpu`` (this machine, computing in ``precision``, compiled or not) or a GPU name."""
    return (cpu(processes=processes, precision=precision, compiled=compiled) if name.lower() == "cpu"
            else gpu(name, processes))
