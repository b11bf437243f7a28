"""``medical/unet`` and ``medical/swinunetr``: self-configuring 2-D / 3-D segmentation on MONAI.

Reads top to bottom: config (every 0 / '' / 'auto' filled in by the plan), data and plan (the nnU-Net
idea: derive the configuration from the data, here also from the compute budget), network and loss,
sliding-window evaluation with mirrored test-time views, training. The two recipes share this train
function; SwinUNETR trades the UNet's convolutions for a Swin transformer encoder.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import distributed, optim, schedule
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import recipe
from recipe_zoo.recipes.medical.data import (Case, PatchBatches, SegData, augmentation, inspect_view, load_data,
                                             parse_ints, preprocess, slices)
from recipe_zoo.recipes.medical.models import build_loss, build_model, class_weights
from recipe_zoo.recipes.medical.plan import describe_plan, fingerprint, make_plan, network_cost

# =============================================================================================
# Config: every 0 / '' / 'auto' is filled in by the plan (printed, saved as plan.json)
# =============================================================================================


@dataclass
class MedicalConfig(LoopSettings):
    data: str = "synthetic-2d"  # dataset name (zoo data list), a Decathlon folder (dataset.json) or image/mask folders
    label_values: str = ""  # mask values in class order, background first (e.g. '255,0'); '' = the dataset's / sorted
    val_fraction: float = 0.2  # own data: validation fraction of the cases (fixed split, seed 0)
    dims: int = 0  # 2 or 3 spatial dims for the network; 0 = plan (2 for images and very anisotropic volumes)
    spacing: str = ""  # target voxel spacing 'a,b[,c]' (mm); '' = plan (median spacing of the data)
    normalize: Literal["auto", "zscore", "ct", "none"] = "auto"  # zscore: per image; ct: clip to fg 0.5-99.5%
    patch: str = ""  # training patch 'a,b[,c]' (voxels); '' = plan (from the image size and the compute budget)
    batch_size: int = 0  # patches per step; 0 = plan (from memory and the compute budget)
    model: Literal["unet", "basicunet", "swinunetr"] = "unet"  # MONAI UNet (residual units), BasicUNet or SwinUNETR
    width: int = 0  # channels of the first level (doubling per level, capped at 16x); 0 = plan
    levels: int = 0  # resolution levels; 0 = plan (halve until feature maps are ~8 voxels, at most 6)
    res_units: int = 2  # residual units per level (unet)
    full_res: bool = False  # unet: add a full-resolution first level (MONAI's starts strided); 2x cost, no gain on ISBI
    norm: Literal["instance", "batch"] = "instance"  # normalisation layers of the unet
    channels_last: bool = True  # NHWC memory layout for 2-D networks (faster convolutions with batch norm on CPU)
    loss: Literal["dice_ce", "dice_focal", "tversky", "ce"] = "dice_ce"  # tversky: alpha 0.3, beta 0.7
    class_weights: str = ""  # cross-entropy class weights: '' none, 'balanced' (inverse sqrt frequency) or 'w0,w1,...'
    lr: float = 2e-3  # AdamW peak learning rate
    weight_decay: float = 1e-4  # AdamW decoupled decay on weights (never biases or norms)
    warmup: float = 0.03  # fraction of the budget warming up linearly
    schedule: Literal["cosine", "wsd", "linear", "constant"] = "cosine"  # LR shape over budget progress
    fg_fraction: float = 0.33  # fraction of patches centred on a foreground voxel (nnU-Net oversampling)
    flip_axes: str = "auto"  # spatial axes that are mirror-symmetric ('0,1'); auto = the dataset's, none for own data
    rotate: float = 15.0  # max rotation (degrees, in-plane for 2-D) of the spatial augmentation; 0 = off
    zoom: float = 0.15  # max relative zoom of the spatial augmentation
    spatial_prob: float = 0.3  # probability of the rotation/zoom augmentation per patch
    elastic: bool = False  # elastic deformation (slow on CPU; in place of the affine augmentation)
    intensity: float = 0.1  # random intensity scaling and shift (fraction of one std), prob 0.5 each; 0 = off
    noise: float = 0.1  # Gaussian noise std (in std units), prob 0.15; 0 = off
    overlap: float = 0.5  # sliding-window overlap at inference
    tta: bool = True  # final evaluation averages over mirrorings along flip_axes
    hd95: bool = False  # also report the 95th-percentile Hausdorff distance (in spacing units)
    eval_every: float = 0.25  # fraction of the budget between (quick, no-TTA) evaluations
    compute_efficiency: float = 0.0  # planner's expected fraction of peak FLOP/s; 0 = 0.4 on CPU, 0.3 on GPU
    min_steps: int = 600  # planner: shrink batch, then patch, until the budget buys at least this many steps


# =============================================================================================
# Evaluation: sliding windows over whole images, mirrored test-time views, MONAI metrics
# =============================================================================================

def predict(model: nn.Module, case: Case, plan: dict, overlap: float, mirror_axes: tuple[int, ...],
            device: torch.device) -> torch.Tensor:
    """Class probabilities (K, *spatial) for one whole case."""
    import itertools

    from monai.inferers import sliding_window_inference

    x = case.image.unsqueeze(0).to(device)  # (1, C, *spatial)
    axis = plan["slice_axis"]
    if axis is not None:  # 2-D network on a volume: its slices become the batch
        x = x.movedim(axis + 2, 0)[:, 0]  # (S, C, a, b)

    def window(t: torch.Tensor) -> torch.Tensor:
        return sliding_window_inference(t, plan["patch"], plan["batch_size"], model, overlap=overlap,
                                        mode="gaussian").float().softmax(1)

    views = [()] + [c for r in range(1, len(mirror_axes) + 1) for c in itertools.combinations(mirror_axes, r)]
    probs = 0
    for flip in views:
        dims = [a + 2 for a in flip]
        probs = probs + (window(x.flip(dims)).flip(dims) if flip else window(x))
    probs = probs / len(views)  # (B, K, ...)
    return probs.movedim(0, axis + 1) if axis is not None else probs[0]  # slices back in place: (K, *spatial)


def evaluate(model: nn.Module, cases: list[Case], plan: dict, classes: list[str], device: torch.device, *,
             overlap: float, mirror_axes: tuple[int, ...] = (), hd95: bool = False) -> dict[str, float]:
    """Per-class Dice and IoU on whole cases (mean over cases); ``dice`` = mean over foreground classes,
    ``miou`` = mean IoU over all classes (background included, the semantic-segmentation convention)."""
    from monai.metrics import DiceMetric, HausdorffDistanceMetric, MeanIoU

    k = len(classes)
    dice, iou = DiceMetric(include_background=True, reduction="mean_batch"), MeanIoU(include_background=True,
                                                                                     reduction="mean_batch")
    distance = HausdorffDistanceMetric(include_background=False, percentile=95, reduction="mean_batch")
    for case in cases:
        probs = predict(model, case, plan, overlap, mirror_axes, device).cpu()
        pred = F.one_hot(probs.argmax(0), k).movedim(-1, 0)[None]
        truth = F.one_hot(case.label[0].long(), k).movedim(-1, 0)[None]
        dice(pred, truth)
        iou(pred, truth)
        if hd95:
            distance(pred, truth, spacing=plan["spacing"])
    per_dice, per_iou = dice.aggregate().tolist(), iou.aggregate().tolist()
    out = {"dice": float(np.nanmean(per_dice[1:])), "miou": float(np.nanmean(per_iou))}
    out.update({f"dice_{name}": v for name, v in zip(classes[1:], per_dice[1:])})
    out.update({f"iou_{name}": v for name, v in zip(classes, per_iou)})
    if hd95:
        out["hd95"] = float(np.nanmean(distance.aggregate().tolist()))
    return out


# =============================================================================================
# Training
# =============================================================================================

def resolve_flip_axes(cfg: MedicalConfig, data: SegData, plan: dict, spatial_dims: int) -> tuple[int, ...]:
    """Mirror-symmetric axes, in the network's axes (a 2-D plan over volumes drops the slice axis)."""
    if cfg.flip_axes in ("", "none"):
        axes = []
    elif cfg.flip_axes == "auto":
        axes = list(data.symmetric_axes)
    else:
        axes = parse_ints(cfg.flip_axes, "flip_axes")
        bad = [a for a in axes if not 0 <= a < spatial_dims]
        if bad:
            raise ZooError(f"flip_axes={cfg.flip_axes!r}: axis {bad[0]} does not exist; the images have "
                           f"{spatial_dims} spatial axes (0..{spatial_dims - 1})")
    cut = plan["slice_axis"]
    if cut is not None:
        axes = [a - (a > cut) for a in axes if a != cut]
    return tuple(sorted(set(axes)))


@recipe("medical/unet", config=MedicalConfig, benchmark="isbi2012-membrane", metric="dice", budget="60s",
        summary="self-configuring 2-D/3-D segmentation: MONAI UNet, DiceCE, patches, sliding windows, Dice + mIoU")
@recipe("medical/swinunetr", config=MedicalConfig, benchmark="isbi2012-membrane", metric="dice", budget="60s",
        summary="the same pipeline on MONAI SwinUNETR (3-D volumes, or 2-D), AdamW 1e-3",
        defaults={"model": "swinunetr", "lr": 1e-3, "weight_decay": 1e-2})
def train(cfg: MedicalConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device)
    data = load_data(cfg, run)
    if run.inspecting:
        train_view, val_view = inspect_view(data.train, data.val)
        run.inspect(train=train_view, val=val_view, task="segmentation", num_classes=len(data.classes))
    in_channels, spatial_dims = data.train[0].image.shape[0], data.train[0].image.ndim - 1
    fp = fingerprint(data)
    # Planned once, by rank 0: a timing-dependent choice must not differ between ranks.
    plan = distributed.broadcast_object(make_plan(fp, cfg, device, run.budget,
                                                  network_cost(cfg, in_channels, len(data.classes))))
    plan["flip_axes"] = list(resolve_flip_axes(cfg, data, plan, spatial_dims))
    run.log(f"{data.name}: {len(data.train)} train / {len(data.val)} validation cases, {in_channels} channel(s), "
            f"classes {data.classes}, voxel fractions {fp['class_fraction']}")
    run.log("plan: " + describe_plan(plan, fp) + f", flips along {plan['flip_axes'] or 'no axes'}")
    (run.dir / "plan.json").write_text(json.dumps({"fingerprint": fp, "plan": plan}, indent=1))
    run.report("plan", describe_plan(plan, fp))
    train_cases = [preprocess(c, plan, fp) for c in data.train]
    val_cases = [preprocess(c, plan, fp) for c in data.val]
    if plan["slice_axis"] is not None:
        train_cases = [s for c in train_cases for s in slices(c, plan["slice_axis"])]
    model = build_model(cfg.model, plan["dims"], in_channels, len(data.classes), plan["width"], plan["levels"],
                        cfg).to(device)
    layout = torch.channels_last if cfg.channels_last and plan["dims"] == 2 else torch.contiguous_format
    model = model.to(memory_format=layout)
    weights = class_weights(cfg, fp, len(data.classes))
    criterion = build_loss(cfg, weights.to(device) if weights is not None else None)
    augment = augmentation(cfg, plan, tuple(plan["flip_axes"]))
    batches = PatchBatches(train_cases, augment, plan["batch_size"], plan["patch"], run.seed)
    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), cfg.lr)
    update = functools.partial(schedule.apply_schedules, lr=schedule.make_schedule(cfg.schedule, warmup=cfg.warmup))

    def loss_fn(model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        x = x.to(device, non_blocking=True).contiguous(memory_format=layout)
        return criterion(model(x), y.to(device, non_blocking=True))

    def quick_eval(m: nn.Module) -> dict[str, float]:  # progress checks: no mirroring, less overlap
        return evaluate(m, val_cases, plan, data.classes, device, overlap=min(cfg.overlap, 0.25))

    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=quick_eval,
                 update_hparams=update, settings=LoopSettings.of(cfg))
    final_model = result.eval_model.eval()
    with torch.no_grad(), autocast(device, resolve_precision(device, cfg.precision)):
        final = evaluate(final_model, val_cases, plan, data.classes, device, overlap=cfg.overlap,
                         mirror_axes=tuple(plan["flip_axes"]) if cfg.tta else (), hd95=cfg.hd95)
    run.log("final (whole cases, sliding windows" + (", mirrored views" if cfg.tta and plan["flip_axes"] else "")
            + "): " + " ".join(f"{k}={v:.4f}" for k, v in final.items()))
    export_safetensors(final_model, run.dir / "model.safetensors",
                       metadata={"recipe": run.spec.name, "plan": json.dumps(plan)})
    return {**result.stats(), **final}
