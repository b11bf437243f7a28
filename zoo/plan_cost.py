"""What a model of N parameters costs to train: Chinchilla (20 tokens per parameter) and inference-optimal (100-200)
token counts, training FLOPs 6·N·D, memory (18-20 bytes per parameter for bf16 Adam training, plus activations) and
the time at the share of peak the device profiles (``core.devices``) say a transformer reaches, or a stated MFU, on
this machine (measured peak) and on named GPUs (datasheet peaks) (``zoo plan --params N | --recipe NAME``)."""
from __future__ import annotations

import re

from recipe_zoo.core.errors import ZooError

TOKENS_PER_PARAM = 20.0  # Chinchilla, compute-optimal
INFERENCE_TOKENS_PER_PARAM = (100.0, 200.0)
TRAIN_BYTES_PER_PARAM = (18.0, 20.0)  # bf16 weights + fp32 master + Adam moments + gradients
DEFAULT_GPUS = ("H100", "A100", "RTX 4090")

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_count(text: str) -> float:
    """125M, 1.3B, 7e9, 350k."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgtKMBGT]?)\s*", text)
    if not m:
        raise ZooError(f"--params {text!r}: give a count like 125M, 1.3B or 7e9")
    value = float(m.group(1)) * _SUFFIX.get(m.group(2).lower(), 1.0)
    if value <= 0:
        raise ZooError(f"--params {text!r}: must be positive")
    return value


def compute_plan(params: float, tokens: float | None = None) -> dict:
    """The formulas: D = 20 N (Chinchilla), FLOPs = 6 N D, training memory 18-20 bytes per parameter."""
    d = tokens if tokens else TOKENS_PER_PARAM * params
    return {
        "params": params, "tokens": d, "flops": 6 * params * d,
        "inference_tokens": tuple(k * params for k in INFERENCE_TOKENS_PER_PARAM),
        "inference_flops": tuple(6 * params * k * params for k in INFERENCE_TOKENS_PER_PARAM),
        "train_memory_bytes": tuple(b * params for b in TRAIN_BYTES_PER_PARAM),
        "weights_bf16_bytes": 2 * params,
    }


def activation_bytes(seq_len: int, micro_batch: int, width: int, depth: int, heads: int) -> float:
    """Activations kept for backward in a transformer, bf16, no recomputation (Korthikanti et al. 2022):
    s·b·h·(34 + 5·a·s/h) bytes per layer."""
    s, b, h, a = seq_len, micro_batch, width, heads
    return depth * s * b * h * (34 + 5 * a * s / h)


def human(x: float, unit: str = "") -> str:
    prefixes = ((1e15, "P"), (1e12, "T"), (1e9, "G" if unit else "B"), (1e6, "M"), (1e3, "K"))
    for div, s in prefixes:  # counts: 2.5 B tokens; units: 2.5 GB, 179 GFLOP/s
        if abs(x) >= div:
            return f"{x / div:.3g} {s}{unit}".rstrip()
    return f"{x:.3g} {unit}".rstrip()


def duration(seconds: float) -> str:
    for div, s in ((365 * 86400, "years"), (86400, "days"), (3600, "hours"), (60, "min")):
        if seconds >= div:
            return f"{seconds / div:.3g} {s}"
    return f"{seconds:.3g} s"


def estimate(args) -> None:
    """``--params N`` or ``--recipe NAME [key=value ...]``: the cost of training that many parameters (a recipe's
    shape printed first), on this machine and the ``--gpu`` list."""
    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise ZooError(f"--mfu {args.mfu}: give a fraction in (0, 1]")
    if args.gpus < 1:
        raise ZooError(f"--gpus {args.gpus}: give 1 or more")
    shape = cfg = None
    if args.recipe:
        cfg, shape, params = recipe_shape(args.recipe, args.overrides)
        print(f"{args.recipe} depth {shape.depth}: width {shape.width}, {shape.heads} heads, vocab {shape.vocab}, "
              f"context {shape.seq_len}")
    else:
        params = parse_count(args.params)
    tokens = parse_count(args.tokens) if args.tokens else None
    print_compute(params, tokens=tokens, gpus=args.gpu or list(DEFAULT_GPUS), gpu_count=args.gpus,
                  mfu=args.mfu, shape=shape, cfg=cfg)


def recipe_shape(name: str, overrides: list[str]):
    """The transformer shape a recipe's config describes (its ``shape`` hook; llm/gpt needs depth=N, or --budget
    for what depth=0 would choose)."""
    from recipe_zoo import config, registry

    spec = registry.get(name)
    if "shape" not in spec.hooks:
        shaped = [n for n, r in registry.load_all().items() if "shape" in r.hooks]
        raise ZooError(f"--recipe {name}: no transformer shape to read; use {', '.join(shaped)}, --params N, or "
                       f"--budget B for {name}'s own sizing")
    cfg = config.build(spec.config, spec.defaults, None, overrides, spec.name)
    if getattr(cfg, "depth", 1) <= 0:
        raise ZooError(f"--recipe {name} needs depth=N (depth=0 is sized at run time: add --budget B to see what "
                       "it would choose)")
    shape, params = spec.hooks["shape"](cfg)
    return cfg, shape, params


def print_compute(params: float, *, tokens: float | None, gpus: list[str], gpu_count: int, mfu: float | None,
                  shape=None, cfg=None, log=print) -> None:
    from recipe_zoo.core import devices

    for name in gpus:
        if devices.gpu(name) is None:
            raise ZooError(f"--gpu {name}: unknown; known: {', '.join(gpu_names())}")
    p = compute_plan(params, tokens)
    log(f"parameters N:          {human(params)}")
    log(f"tokens D:              {human(p['tokens'])}" + (" (Chinchilla: 20 per parameter)" if not tokens else ""))
    lo, hi = p["inference_tokens"]
    log(f"inference-optimal D:   {human(lo)}-{human(hi)} (100-200 per parameter: a smaller model trained longer)")
    log(f"training FLOPs 6·N·D:  {p['flops']:.3g}  (inference-optimal: {p['inference_flops'][0]:.3g}-"
        f"{p['inference_flops'][1]:.3g})")
    mlo, mhi = p["train_memory_bytes"]
    log(f"training memory:       {human(mlo, 'B')}-{human(mhi, 'B')} for weights, gradients and Adam state "
        "(bf16 training, 18-20 bytes per parameter) + activations")
    if shape is not None and not cfg.micro_batch:
        log("activations:           micro_batch=0: the run sizes it to the device's memory (--budget B shows it)")
    elif shape is not None:
        act = activation_bytes(shape.seq_len, cfg.micro_batch, shape.width, shape.depth, shape.heads)
        log(f"activations:           {human(act, 'B')} at micro_batch {cfg.micro_batch} x seq_len {shape.seq_len} "
            "(bf16, none recomputed; activation_checkpointing=true keeps about one layer's)")
    log(f"inference weights:     {human(p['weights_bf16_bytes'], 'B')} in bf16")
    log("")
    width = shape.width if shape is not None else None
    log("time for D tokens (FLOPs / (peak x share of it)):")
    for profile in [devices.cpu()] + [devices.gpu(name, gpu_count) for name in gpus]:
        share = mfu or profile.share("matmul", width)
        count = f"{profile.processes} x " if profile.kind == "cuda" else ""
        label = "this machine" if profile.kind == "cpu" else f"{count}{profile.name}"
        how = "stated" if mfu else "the device profile's" + (f" at width {width}" if width else "")
        log(f"  {label + ':':<14} {duration(p['flops'] / (profile.peak * share * profile.processes)):>14}  "
            f"{profile.peak_source} peak {human(profile.peak, 'FLOP/s')} x {share:.0%} ({how})"
            + (" each" if profile.processes > 1 else ""))


def gpu_names() -> list[str]:
    """The GPUs the zoo knows a datasheet peak of (what ``--gpu`` accepts)."""
    from recipe_zoo.core.flops import GPU_PEAK_TFLOPS

    return list(GPU_PEAK_TFLOPS)

