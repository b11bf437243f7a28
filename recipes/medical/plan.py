"""The self-configuring part (nnU-Net's rules, sized for this device and budget): the dataset's
fingerprint, the plan derived from it (every value the user set wins), the network's measured cost the
plan sizes patch and batch by, and the one-line description the run prints.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from recipe_zoo.core import devices
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.medical.data import RawCase, SegData, parse_floats, parse_ints
from recipe_zoo.recipes.medical.models import Network, build_model, swin_features

# =============================================================================================
# Fingerprint and plan (nnU-Net's rules, sized for this device and budget)
# =============================================================================================

@dataclass(frozen=True)
class PlanSettings:
    """What the user set of the plan (the recipe's fields of the same names): 0 / '' / 'auto' leaves it to the plan."""
    model: str  # unet, basicunet or swinunetr: the patch's multiple
    dims: int  # 2 or 3; 0 = plan
    spacing: str  # 'a,b[,c]'; '' = plan
    normalize: str  # auto, zscore, ct or none
    width: int  # 0 = plan
    levels: int  # 0 = plan
    patch: str  # 'a,b[,c]'; '' = plan
    batch_size: int  # 0 = plan
    compute_efficiency: float  # expected fraction of peak FLOP/s; 0 = the device profile's
    min_steps: int  # shrink batch, then patch, until the budget buys this many steps


def fingerprint(data: SegData, cases: list[RawCase]) -> dict:
    """What the plan is derived from: sizes, spacings, intensities (on foreground), class fractions, of
    ``cases``: a fold's training cases (never its validation or test cases)."""
    rng = np.random.default_rng(0)
    shapes = np.array([c.image.shape[1:] for c in cases])
    spacings = np.array([c.spacing for c in cases])
    counts = sum(np.bincount(c.label.ravel(), minlength=len(data.classes))[:len(data.classes)] for c in cases)
    fg = [c.image[0][c.label[0] > 0] for c in cases]
    fg = [rng.choice(v, size=min(v.size, 10_000), replace=False) for v in fg if v.size]
    fg = np.concatenate(fg) if fg else np.concatenate([c.image[0].ravel() for c in cases])
    spacing = np.median(spacings, axis=0)
    return {
        "cases": len(cases), "channels": int(cases[0].image.shape[0]), "spatial_dims": int(shapes.shape[1]),
        "median_shape": [int(v) for v in np.median(shapes, axis=0)],
        "min_shape": [int(v) for v in shapes.min(axis=0)], "max_shape": [int(v) for v in shapes.max(axis=0)],
        "total_voxels": int(sum(math.prod(s) for s in shapes)),
        "median_spacing": [round(float(v), 4) for v in spacing],
        "anisotropy": round(float(spacing.max() / spacing.min()), 3),
        "intensity_fg": {"mean": float(fg.mean()), "std": float(fg.std()), "p00_5": float(np.percentile(fg, 0.5)),
                         "p99_5": float(np.percentile(fg, 99.5))},
        "class_fraction": {name: round(float(n / counts.sum()), 5) for name, n in zip(data.classes, counts)},
        "modality": data.modality,
    }


def network_levels(patch: list[int], levels: int) -> int:
    """Halve until the smallest side of the deepest feature map is about 8 voxels (2 to 6 levels)."""
    if levels == 1:  # MONAI's UNet needs one down- and one up-sampling at least
        raise ZooError("levels=1: a UNet has 2 levels at least (0 = the plan's choice)")
    return levels or int(max(2, min(6, math.floor(math.log2(max(8, min(patch)) / 8)) + 1)))


def _round_up(shape, multiple: int) -> list[int]:
    return [max(multiple, int(math.ceil(s / multiple)) * multiple) for s in shape]


def make_plan(fp: dict, settings: PlanSettings, device, budget, measure) -> dict:
    """The configuration, from the fingerprint; every value the user set wins (listed in ``set_by_user``).

    - dims: 2 for images, and for volumes whose coarsest spacing is over 3x the finest (slices then
      run across the coarse axis); else 3.
    - spacing: the median spacing; normalisation: CT clipping + dataset statistics for CT, else per-image z-score.
    - patch: the median image (capped at 1024 px / 160 voxels a side); levels: halve down to ~8 voxels.
    - batch: what fits 40% of free accelerator memory (25% of free RAM on CPU), at most 5% of the
      training voxels per step (nnU-Net), and, with a time budget, no more than leaves ``min_steps``
      steps at the rate and per-step latency of the device's profile (``core.devices``: its ``conv`` work;
      ``compute_efficiency`` replaces the share); when even batch 2 cannot, the patch's longest side is halved.
      Where a step's latency alone would put ``min_steps`` out of reach, the floor is the steps whose time is at
      least half compute (a smaller patch would not buy more steps).

    ``measure(dims, levels, width) -> (forward FLOPs, activation bytes) per input voxel`` of the network.
    ``device``: a torch device, or a ``DeviceProfile`` (``zoo plan``).
    """
    profile = device if isinstance(device, devices.DeviceProfile) else devices.for_device(device)
    user: list[str] = []

    def pick(key, value, planned):
        if value:
            user.append(key)
            return value
        return planned

    dims = pick("dims", settings.dims, 2 if fp["spatial_dims"] == 2 or fp["anisotropy"] > 3 else 3)
    if dims not in (2, 3) or dims > fp["spatial_dims"]:
        raise ZooError(f"dims={dims}: the data has {fp['spatial_dims']} spatial dims; use 2 or 3 (at most that)")
    target = parse_floats(settings.spacing, "spacing")
    if target is not None and len(target) != fp["spatial_dims"]:
        raise ZooError(f"spacing={settings.spacing!r}: needs {fp['spatial_dims']} values, one per spatial axis")
    spacing = pick("spacing", target, list(fp["median_spacing"]))
    slice_axis = int(np.argmax(spacing)) if dims < fp["spatial_dims"] else None
    normalize = pick("normalize", "" if settings.normalize == "auto" else settings.normalize,
                     "ct" if fp["modality"].lower().startswith("ct") else "zscore")
    if normalize not in ("zscore", "ct", "none"):
        raise ZooError(f"normalize={settings.normalize!r}: choose auto, zscore, ct or none")
    shape = [s * a / b for s, a, b in zip(fp["median_shape"], fp["median_spacing"], spacing)]
    if slice_axis is not None:
        shape.pop(slice_axis)
    width = pick("width", settings.width, 32 if profile.kind == "cuda" else 16)
    fixed_patch = parse_ints(settings.patch, "patch")
    if fixed_patch is not None:
        user.append("patch")
        if len(fixed_patch) != dims or min(fixed_patch) < 8:
            raise ZooError(f"patch={settings.patch!r}: needs {dims} sizes of at least 8, one per network axis")
    if settings.batch_size:
        user.append("batch_size")
    patch = list(fixed_patch or [min(s, 1024 if dims == 2 else 160) for s in shape])
    full_patch = None  # nnU-Net's patch, once rounded to the network's multiple
    memory = (0.4 if profile.kind == "cuda" else 0.25) * profile.memory
    rate = (settings.compute_efficiency or profile.share("conv")) * profile.peak
    latency = profile.latency("conv")
    seconds = budget.amount if budget.kind == "seconds" else None
    # A step's latency alone can put min_steps out of reach (6 s a fold at 30 ms a step buys 200): a smaller patch
    # cannot help then, so the floor becomes the steps whose time is at least half compute.
    min_steps = settings.min_steps
    if seconds and latency:
        min_steps = max(1, min(min_steps, int(seconds / (2 * latency))))
    while True:
        levels = network_levels(patch, settings.levels)
        multiple = 32 if settings.model == "swinunetr" else 2 ** (levels - 1)
        smallest = 64 if settings.model == "swinunetr" else multiple  # Swin's deepest stage is 1/32 of the patch
        if fixed_patch and (any(p % multiple for p in patch) or min(patch) < smallest):
            raise ZooError(f"patch={settings.patch!r}: sizes must be multiples of {multiple} (at least {smallest}) "
                           f"for {settings.model}" + (f" with {levels} levels" if settings.model == "unet" else ""))
        patch = patch if fixed_patch else [max(smallest, p) for p in _round_up(patch, multiple)]
        full_patch = full_patch or list(patch)
        voxels = math.prod(patch)
        flops, activation_bytes = measure(dims, levels, width)
        sample_flops = 3 * flops * voxels  # forward + backward
        caps = [int(memory // (activation_bytes * voxels)), int(0.05 * fp["total_voxels"] / voxels), 64]
        if seconds:
            caps.append(int((seconds - min_steps * latency) * rate / (min_steps * sample_flops)))
        batch = settings.batch_size or max(2, min(caps))
        steps = int(seconds * rate / (batch * sample_flops + latency * rate)) if seconds else None
        short = (steps is not None and steps < min_steps) or caps[0] < batch
        if fixed_patch or not short or max(patch) <= max(16, smallest):
            break
        axis = int(np.argmax(patch))  # halve the longest side and look again
        patch[axis] = max(multiple, patch[axis] // 2)
    network = {"unet": f"UNet, {levels} levels from width {width}", "basicunet": f"BasicUNet, width {width}",
               "swinunetr": f"SwinUNETR, feature size {swin_features(width)}"}.get(settings.model, settings.model)
    why = _why(settings, seconds, latency, min_steps, steps, caps, batch, patch, full_patch)
    return {"dims": dims, "network": network, "spacing": spacing, "slice_axis": slice_axis, "normalize": normalize,
            "width": width, "levels": levels, "patch": patch, "batch_size": batch, "expected_steps": steps,
            "gflop_per_step": round(sample_flops * batch / 1e9, 2), "set_by_user": user, "why": why}


def _why(settings: PlanSettings, seconds, latency, min_steps, steps, caps, batch, patch, full_patch) -> str:
    """What bound the plan's batch and patch, in a line: the memory, nnU-Net's 5% of the voxels, the budget's
    step floor (and why the floor is under ``min_steps``, where latency put it there), or nothing."""
    note = ""
    if seconds and min_steps < settings.min_steps:
        note = (f" (min_steps={settings.min_steps} lowered: at {latency * 1e3:.0f} ms a step of latency the budget "
                f"buys at most {int(seconds / latency)})")
    if patch != full_patch and not settings.patch:
        return (f"patch halved from nnU-Net's {'x'.join(map(str, full_patch))} to {'x'.join(map(str, patch))} to "
                f"keep {min_steps} steps{note}")
    if steps is not None and steps < min_steps:
        return f"the smallest batch and patch; the budget buys {steps} steps, under {min_steps}{note}"
    budget = f"; the budget buys {steps} steps (at least {min_steps}){note}" if steps is not None else ""
    if settings.batch_size:
        return "nnU-Net's patch" + budget
    names = ["memory", "nnU-Net's 5% of the training voxels a step", "64 at most", "the budget's steps"]
    bound = min(range(len(caps)), key=lambda i: caps[i])
    if batch > caps[bound]:  # batch 2 at least, over every cap
        return f"batch 2, the least: {names[bound]} alone would allow {max(caps[bound], 0)}"
    return f"nnU-Net's patch; batch {batch} bound by {names[bound]}{budget}"


def describe_plan(plan: dict, fp: dict) -> str:
    steps = f", ~{plan['expected_steps']} steps in the budget" if plan["expected_steps"] else ""
    user = f"; set by you: {', '.join(plan['set_by_user'])}" if plan["set_by_user"] else ""
    return (f"{plan['dims']}-D, patch {'x'.join(map(str, plan['patch']))}, batch {plan['batch_size']}, "
            f"{plan['network']}, spacing {','.join(f'{s:g}' for s in plan['spacing'])}"
            f", {plan['normalize']} normalisation{steps} (median image {'x'.join(map(str, fp['median_shape']))})"
            f"{user}")


# =============================================================================================
# Network cost: what the plan sizes patch and batch by (measured on the real network)
# =============================================================================================

def network_cost(net: Network, in_channels: int, classes: int):
    """``(dims, levels, width) -> (forward FLOPs, activation bytes) per input voxel``, measured once
    on a small input (both grow linearly with the voxels)."""
    from recipe_zoo.core.flops import counting_flops

    cache: dict = {}

    def measure(dims: int, levels: int, width: int) -> tuple[float, float]:
        key = (dims, levels, width)
        if key not in cache:
            model = build_model(net, dims, in_channels, classes, width, levels)
            side = max(64 if dims == 2 or net.model == "swinunetr" else 32, 2 ** (levels - 1) * 2)
            x = torch.zeros(1, in_channels, *([side] * dims))
            stored = [0]

            def hook(module, args, out):
                if isinstance(out, torch.Tensor) and not list(module.children()):
                    stored[0] += out.numel() * 4

            handles = [m.register_forward_hook(hook) for m in model.modules()]
            with torch.no_grad(), counting_flops() as counter:
                model(x)
            for h in handles:
                h.remove()
            cache[key] = (counter.get_total_flops() / x[0, 0].numel(), stored[0] / x[0, 0].numel())
        return cache[key]

    return measure
