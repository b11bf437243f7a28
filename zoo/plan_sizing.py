"""What a recipe's own sizing rule would choose for a budget on a device: shape, batch, steps and predicted
throughput, through the registry (``zoo plan --recipe NAME --budget B [--gpu NAME [--gpus N] | --device cpu]``)."""
from __future__ import annotations

from recipe_zoo.core.api import SimpleRun
from recipe_zoo.core.errors import ZooError
from recipe_zoo.plan_cost import gpu_names, human


def size_for_budget(args) -> int:
    """``zoo plan --recipe NAME --budget B [--gpu NAME [--gpus N] | --device cpu]``: the one device's profile, then
    the recipe's sizing on it."""
    import torch

    from recipe_zoo import config, registry
    from recipe_zoo.core import devices
    from recipe_zoo.core.precision import resolve_precision
    from recipe_zoo.runs import parse_budget_arg

    if len(args.gpu) > 1 or (args.gpu and args.device):
        raise ZooError("--recipe with --budget sizes for one device: give one --gpu NAME or --device cpu")
    if args.gpus < 1:
        raise ZooError(f"--gpus {args.gpus}: give 1 or more")
    if args.device and args.device.lower() != "cpu":
        raise ZooError(f"--device {args.device}: cpu (this machine); for a GPU give --gpu NAME")
    name = args.gpu[0] if args.gpu else "cpu"
    spec = registry.get(args.recipe)
    cfg = config.build(spec.config, spec.defaults, None, args.overrides, spec.name)
    # on this CPU, the dtype a run would compute in (auto resolved as a run resolves it) picks the peak and shares
    cpu_dtype = resolve_precision(torch.device("cpu"), getattr(cfg, "precision", "fp32"), spec.cpu_precision)
    profile = devices.named(name, args.gpus, cpu_dtype, getattr(cfg, "compile", False))
    if profile is None:
        raise ZooError(f"--gpu {name}: unknown; known: {', '.join(gpu_names())} (or --device cpu)")
    print_sizing(spec, cfg, parse_budget_arg(args.budget), profile)
    return 0


def print_sizing(spec, cfg, budget, profile, log=print) -> None:
    """``--recipe NAME --budget B``: the recipe's ``size`` hook on ``profile`` for ``cfg`` (its config with the
    overrides)."""
    hook = spec.hooks.get("size")
    if hook is None:
        from recipe_zoo import registry

        sized = [name for name, r in registry.load_all().items() if "size" in r.hooks]
        raise ZooError(f"--recipe {spec.name} --budget: {spec.name} has no sizing rule; the recipes that size "
                       f"themselves: {', '.join(sized)}")
    run = SimpleRun(budget, log=lambda *a, **k: None)  # the budget to size for; it trains and writes nothing
    plan = hook(cfg, run, profile)
    log(f"{spec.name} for {budget} on {plan.get('profile', profile).describe(plan.get('work', 'matmul'))}")
    for key, label in (("shape", "shape"), ("batch", "batch"), ("params", "parameters"), ("steps", "steps"),
                       ("rate", "throughput"), ("per_param", "per parameter"), ("data", "data"), ("reason", "why")):
        if key in plan:
            value = plan[key]
            value = human(value) if key == "params" else f"{value:,.0f}" if key == "steps" else value
            log(f"  {label + ':':<15}{value}" + (" (predicted)" if key in ("steps", "rate") else ""))

