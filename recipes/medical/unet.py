"""``medical/unet`` and ``medical/swinunetr``: self-configuring 2-D / 3-D segmentation on MONAI.

Reads top to bottom: config (every 0 / '' / 'auto' filled in by the plan) and what the network, the plan and the
augmentation take of it, the predict hook (``zoo predict``; its work is in ``inference.py``, the sliding-window
evaluation with mirrored test-time views it shares with training in ``evaluation.py``) and the plan hook (``zoo
plan``), then training: the split (train / validation / test by a hash of each case's path,
or k folds each with an inner validation where the cases are too few for a test set, as ISBI 2012's 30),
per fold the plan from its training cases (the nnU-Net idea: derive the configuration from the data, here
also from the compute budget), network and loss, training that evaluates on validation only, and the test
cases scored once at the end; then the model saved for use (``model.json``, ``predictions.csv`` and the test
cases' masks in ``predictions/``). The two recipes share this train function; SwinUNETR trades the UNet's
convolutions for a Swin transformer encoder.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

import numpy as np
import torch
from torch import nn

from recipe_zoo.core import artifact, devices, distributed, finetune, items, optim, schedule
from recipe_zoo.core.artifact import Predictions, PredictOptions
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.loop import COMPILE_AUTO_SECONDS, LoopSettings, fit, resolve_compile
from recipe_zoo.core.metrics import summarize_folds
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import Count, Fraction, NonNegative, NonNegativeInt, Positive, Range, Share, Unit, recipe
from recipe_zoo.recipes.medical import inference, overlays
from recipe_zoo.recipes.medical.data import SegData, load_data, parse_ints
from recipe_zoo.recipes.medical.evaluation import dice_items, evaluate, score_cases, summarize
from recipe_zoo.recipes.medical.masks import MaskWriter
from recipe_zoo.recipes.medical.models import Network, build_loss, build_model, class_weights
from recipe_zoo.recipes.medical.patches import Augmentation, PatchBatches, augmentation
from recipe_zoo.recipes.medical.plan import PlanSettings, describe_plan, fingerprint, make_plan, network_cost
from recipe_zoo.recipes.medical.preprocess import preprocess, slices
from recipe_zoo.recipes.medical.split import Fold, inspect_view, split_cases

# =============================================================================================
# Config: every 0 / '' / 'auto' is filled in by the plan (printed, saved as plan.json)
# =============================================================================================

Folds = Annotated[int, Range(-1)]  # -1 auto, 0 one split, else k >= 2 (split_cases refuses 1 and k > cases)
Dims = Annotated[int, Range(0, 3)]  # 0 plan, 2 or 3 (the plan refuses 1)


@dataclass
class MedicalConfig(LoopSettings):
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("label_values", "folds", "val_fraction", "test_fraction", "train_cases")
    DEVICE_FIELDS: ClassVar[tuple[str, ...]] = ("width", "levels", "patch", "batch_size", "precision", "tf32")
    SIZING_INPUTS: ClassVar[tuple[str, ...]] = ("min_steps",)  # read only by the planner, to choose batch and patch
    data: str = "synthetic-2d"  # dataset name (zoo data list), a Decathlon folder (dataset.json) or image/mask folders
    # (a cold compile pays back only from minutes of budget: docs/LOG.md#2026-12-04-compile-auto-from-5-minutes)
    compile: bool | None = None  # torch.compile for training; none (auto): if a fold's time budget is >= 5 minutes
    label_values: str = ""  # mask values in class order, background first (e.g. '255,0'); '' = the dataset's / sorted
    folds: Folds = -1  # k-fold CV (test_dice: mean of folds); 0: train/val/test; -1: 5 for ISBI, folders < 20 cases
    val_fraction: Share = 0.2  # validation: this fraction (rounded down) of the non-test cases, by hash of their path
    test_fraction: Share = 0.2  # folds=0: test, this fraction (rounded down) of the cases, by hash of their path
    # a low-data run (a fine-tune on a few slices, say): validation and test stay whole
    train_cases: NonNegativeInt = 0  # train on only this many of each fold's training cases (hash-chosen); 0 = all
    dims: Dims = 0  # 2 or 3 spatial dims for the network; 0 = plan (2 for images and very anisotropic volumes)
    spacing: str = ""  # target voxel spacing 'a,b[,c]' (mm); '' = plan (median spacing of the data)
    normalize: Literal["auto", "zscore", "ct", "none"] = "auto"  # zscore: per image; ct: clip to fg 0.5-99.5%
    patch: str = ""  # training patch 'a,b[,c]' (voxels); '' = plan (from the image size and the compute budget)
    batch_size: NonNegativeInt = 0  # patches per step; 0 = plan (from memory and the compute budget)
    model: Literal["unet", "basicunet", "swinunetr"] = "unet"  # MONAI UNet (residual units), BasicUNet or SwinUNETR
    width: NonNegativeInt = 0  # channels of the first level (doubling per level, capped at 16x); 0 = plan
    levels: NonNegativeInt = 0  # resolution levels; 0 = plan (halve until feature maps are ~8 voxels, at most 6)
    res_units: NonNegativeInt = 2  # residual units per level (unet)
    full_res: bool = False  # unet: add a full-resolution first level (MONAI's starts strided); 2x cost, no gain on ISBI
    norm: Literal["instance", "batch"] = "instance"  # normalisation layers of the unet
    channels_last: bool = True  # NHWC memory layout for 2-D networks (faster convolutions with batch norm on CPU)
    loss: Literal["dice_ce", "dice_focal", "tversky", "ce"] = "dice_ce"  # tversky: alpha 0.3, beta 0.7
    class_weights: str = ""  # cross-entropy class weights: '' none, 'balanced' (inverse sqrt frequency) or 'w0,w1,...'
    lr: Positive = 2e-3  # AdamW peak learning rate
    weight_decay: NonNegative = 1e-4  # AdamW decoupled decay on weights (never biases or norms)
    warmup: Unit = 0.03  # fraction of the budget warming up linearly
    schedule: Literal["cosine", "wsd", "linear", "constant"] = "cosine"  # LR shape over budget progress
    fg_fraction: Unit = 0.33  # fraction of patches centred on a foreground voxel (nnU-Net oversampling)
    flip_axes: str = "auto"  # spatial axes that are mirror-symmetric ('0,1'); auto = the dataset's, none for own data
    rotate: NonNegative = 15.0  # max rotation (degrees, in-plane for 2-D) of the spatial augmentation; 0 = off
    zoom: Fraction = 0.15  # max relative zoom of the spatial augmentation
    spatial_prob: Unit = 0.3  # probability of the rotation/zoom augmentation per patch
    elastic: bool = False  # elastic deformation (slow on CPU; in place of the affine augmentation)
    intensity: NonNegative = 0.1  # random intensity scaling and shift (fraction of one std), prob 0.5 each; 0 = off
    noise: NonNegative = 0.1  # Gaussian noise std (in std units), prob 0.15; 0 = off
    overlap: Fraction = 0.5  # sliding-window overlap at inference
    tta: bool = True  # final evaluation averages over mirrorings along flip_axes
    hd95: bool = False  # also report the 95th-percentile Hausdorff distance (in spacing units)
    eval_every: Unit = 0.25  # fraction of the budget between (quick, no-TTA) evaluations
    compute_efficiency: Unit = 0.0  # planner's expected fraction of peak FLOP/s; 0 = the device profile's (conv)
    min_steps: Count = 309  # planner: shrink batch, then patch, until the budget buys at least this many steps
    weights: str = ""  # fine-tune from a finished medical run (its folder): its network, plan and normalisation


def network(cfg: MedicalConfig) -> Network:
    """What the network is built from (the plan adds dims, width and levels)."""
    return Network(model=cfg.model, res_units=cfg.res_units, full_res=cfg.full_res, norm=cfg.norm,
                   channels_last=cfg.channels_last)


def plan_settings(cfg: MedicalConfig) -> PlanSettings:
    """What the plan takes as set (every 0 / '' / 'auto' it fills in)."""
    return PlanSettings(model=cfg.model, dims=cfg.dims, spacing=cfg.spacing, normalize=cfg.normalize,
                        width=cfg.width, levels=cfg.levels, patch=cfg.patch, batch_size=cfg.batch_size,
                        compute_efficiency=cfg.compute_efficiency, min_steps=cfg.min_steps)


def patch_augmentation(cfg: MedicalConfig) -> Augmentation:
    """How training patches are cut and varied."""
    return Augmentation(fg_fraction=cfg.fg_fraction, rotate=cfg.rotate, zoom=cfg.zoom, spatial_prob=cfg.spatial_prob,
                        elastic=cfg.elastic, intensity=cfg.intensity, noise=cfg.noise)


# =============================================================================================
# Hooks: predict (the trained run on new images / volumes, or on its own test cases again; inference.py does the
# work) and size (zoo plan: fold 0's plan on another device)
# =============================================================================================

@dataclass
class MedicalPredictOptions(PredictOptions):
    labels: str = ""  # masks to score against: a file, or a folder matched by name; '' = data's masks/ folder if any
    fold: Annotated[int, Range(-1)] = -1  # k-fold runs, new data: -1 = mean of every fold model's softmax, k = fold k
    tta: Annotated[int, Range(-1, 1)] = -1  # mirrored views: 1 on, 0 off, -1 = as the run evaluated
    overlap: Annotated[float, Range(-1, 1, high_open=True)] = -1.0  # sliding-window overlap; -1 = the run's


def segment(cfg: MedicalConfig, opts: MedicalPredictOptions, run) -> Predictions:
    """``zoo predict``: masks for new images or volumes (``data=`` a file or folder; PNG for 2-D images, NIfTI
    with the input's geometry for volumes), or with no data the run's own test cases scored again (its metrics).
    Both go through the run's evaluation: its plan's grid, sliding windows, mirrored views, fold models."""
    net = network(cfg)
    return inference.predict_new(cfg, opts, run, net) if opts.data else inference.predict_test(cfg, opts, run, net)


def size_hook(cfg: MedicalConfig, run, profile) -> dict:
    """``zoo plan --recipe medical/unet --budget B --gpu NAME``: fold 0's plan there, from its training cases as a
    run reads them (the budget is shared evenly by the folds, as in a run)."""
    data = load_data(cfg.data, cfg.label_values)
    folds = split_cases(data, cfg.folds, cfg.val_fraction, cfg.test_fraction, cfg.train_cases)
    budget = Budget(run.budget.kind, run.budget.amount / len(folds))
    cfg = with_compile(cfg, budget)
    profile = devices.with_compile(profile, cfg.compile)  # zoo plan made it for compile's value before auto resolved
    fp = fingerprint(data, folds[0].train)
    in_channels, net = data.cases[0].image.shape[0], network(cfg)
    plan = make_plan(fp, plan_settings(cfg), profile, budget, network_cost(net, in_channels, len(data.classes)))
    model = build_model(net, plan["dims"], in_channels, len(data.classes), plan["width"], plan["levels"])
    steps = plan["expected_steps"]
    out = {"work": "conv", "shape": f"{plan['network']}, {plan['dims']}-D patch {'x'.join(map(str, plan['patch']))}",
           "batch": f"{plan['batch_size']} patches a step ({plan['gflop_per_step']} GFLOP)",
           "params": sum(p.numel() for p in model.parameters()),
           "data": f"{len(data.cases)} cases, {len(folds)} fold(s) of {budget} each; fold 0 trains on "
                   f"{len(folds[0].train)}",
           "reason": plan["why"] + (f"; set by you: {', '.join(plan['set_by_user'])}" if plan["set_by_user"] else ""),
           "profile": profile}  # compiled or not, as compile resolved for a fold's budget
    if steps:
        out |= {"steps": steps, "rate": f"{steps * plan['batch_size'] / budget.amount:,.1f} patches/s"}
    return out


# =============================================================================================
# Training: one fold (plan, network, fit on validation), then the folds and the test scored once
# =============================================================================================

def with_compile(cfg: MedicalConfig, budget: Budget, log=None) -> MedicalConfig:
    """``cfg`` with compile=none (auto) resolved for one fold's ``budget`` (``loop.resolve_compile``), said in the
    log when it was auto."""
    compiled = resolve_compile(cfg.compile, budget)
    if cfg.compile is None and log is not None:
        log(f"compile=none: {'compiled' if compiled else 'eager'} (a fold's budget {budget}; compiled from "
            f"{COMPILE_AUTO_SECONDS:.0f}s of time budget, since a cold compile takes tens of seconds)")
    return dataclasses.replace(cfg, compile=compiled)


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


def check_source(cfg: MedicalConfig, data: SegData, folds: list[Fold], source: finetune.Source, log) -> None:
    """A fine-tune keeps its source's network, plan (patch, spacing, width, levels) and fingerprint (the
    normalisation statistics): the same network kind, channels and classes are required, and no test case of this
    run may be one the source trained or selected on (the cases as both runs' split.csv name them)."""
    card = source.card
    if cfg.model != source.config.get("model", cfg.model):
        raise ZooError(f"model={cfg.model}: the source run {source.folder} is a {source.config['model']}; fine-tune "
                       f"it with {card['recipe']}")
    channels = data.cases[0].image.shape[0]
    if (card["preprocess"]["channels"], len(card["classes"])) != (channels, len(data.classes)):
        raise ZooError(f"weights={source.folder}: trained on {card['preprocess']['channels']} channel(s) and classes "
                       f"{card['classes']}; this data has {channels} channel(s) and classes {data.classes}")
    finetune.check_unseen(source, (c.key for fold in folds for c in fold.test), "cases")
    log(f"fine-tuning from {source.folder}: its network, plan and normalisation statistics (fold 0's model)")


def train_fold(cfg: MedicalConfig, run, data: SegData, fold: Fold, index: int, tag: str, device: torch.device,
               measure, source: finetune.Source | None = None) -> tuple[dict, dict, dict, tuple[dict, MaskWriter]]:
    """One fold: the plan from its training cases, training that evaluates on its validation cases, then its
    validation and (only now) its test cases scored with the model training ends with. Returns the validation
    and test scores per case (``score_cases``), the training stats, and what inference needs (the weights' file,
    plan and fingerprint) with the test cases' masks (written to ``predictions/``)."""
    in_channels, spatial_dims = fold.train[0].image.shape[0], fold.train[0].image.ndim - 1
    if source is None:
        fp = fingerprint(data, fold.train)
        # Planned once, by rank 0: a timing-dependent choice must not differ between ranks.
        profile = devices.for_device(device, precision=cfg.precision, compiled=cfg.compile)  # bf16's, compile's
        plan = distributed.broadcast_object(make_plan(fp, plan_settings(cfg), profile, run.budget, measure))
    else:  # a fine-tune: the source's plan and fingerprint (its normalisation statistics), never planned again
        fp, plan = (dict(source.card["models"][0][k]) for k in ("fingerprint", "plan"))
    plan["flip_axes"] = list(resolve_flip_axes(cfg, data, plan, spatial_dims))
    run.log(f"{tag}{data.name}: {len(fold.train)} train / {len(fold.val)} validation / {len(fold.test)} test cases, "
            f"{in_channels} channel(s), classes {data.classes}, voxel fractions {fp['class_fraction']}")
    run.log(f"{tag}validation {[c.key for c in fold.val]}, test {[c.key for c in fold.test]}")
    run.log(tag + "plan: " + describe_plan(plan, fp) + f", flips along {plan['flip_axes'] or 'no axes'} "
            f"({plan['why']})")
    if index == 0:  # the run's plan: fold 0's (each fold plans from its own training cases)
        (run.dir / "plan.json").write_text(json.dumps({"fingerprint": fp, "plan": plan}, indent=1))
        run.report("plan", describe_plan(plan, fp))
    train_cases = [preprocess(c, plan, fp) for c in fold.train]
    val_cases = [preprocess(c, plan, fp) for c in fold.val]
    if plan["slice_axis"] is not None:
        train_cases = [s for c in train_cases for s in slices(c, plan["slice_axis"])]
    if index:  # each fold's network starts from its own seed (a resumed fold 0 leaves the others unchanged)
        torch.manual_seed(run.seed * 1000 + index)
    net = network(cfg)
    model = build_model(net, plan["dims"], in_channels, len(data.classes), plan["width"], plan["levels"])
    if source is not None:
        artifact.load_into(model, source.path(source.card["weights"][0]))
    model.to(device)
    layout = net.layout(plan["dims"])
    model = model.to(memory_format=layout)
    weights = class_weights(cfg.class_weights, fp, len(data.classes))
    criterion = build_loss(cfg.loss, weights.to(device) if weights is not None else None)
    augment = augmentation(patch_augmentation(cfg), plan, tuple(plan["flip_axes"]))
    batches = PatchBatches(train_cases, augment, plan["batch_size"], plan["patch"], run.seed)
    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), cfg.lr)
    update = functools.partial(schedule.apply_schedules, lr=schedule.make_schedule(cfg.schedule, warmup=cfg.warmup))

    def loss_fn(model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        x = x.to(device, non_blocking=True).contiguous(memory_format=layout)
        return criterion(model(x), y.to(device, non_blocking=True))

    def quick_eval(m: nn.Module) -> dict[str, float]:  # progress checks on validation: no mirroring, less overlap
        scores = evaluate(m, val_cases, plan, data.classes, device, overlap=min(cfg.overlap, 0.25))
        return {f"val_{k}": v for k, v in scores.items()}

    mirror = tuple(plan["flip_axes"]) if cfg.tta else ()
    start = {}
    if source is not None:  # the source's weights on validation before the first step, scored as the run ends
        def as_at_the_end(m: nn.Module) -> dict[str, float]:
            scores = score_cases(m, val_cases, plan, data.classes, device, overlap=cfg.overlap, mirror_axes=mirror)
            return summarize(scores, data.classes)

        start = {"val_dice_start": finetune.score_start(model, as_at_the_end, device,
                                                        resolve_precision(device, cfg.precision))["dice"]}
        run.log(f"{tag}validation dice before fine-tuning (the source's weights): {start['val_dice_start']:.6f}")
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=quick_eval,
                 update_hparams=update, settings=LoopSettings.of(cfg))
    final_model = result.eval_model.eval()
    score = functools.partial(score_cases, final_model, plan=plan, classes=data.classes, device=device,
                              overlap=cfg.overlap, mirror_axes=mirror, hd95=cfg.hd95)
    masks = MaskWriter(run.dir / "predictions", data.values or list(range(len(data.classes))), fold.test)
    with torch.no_grad(), autocast(device, resolve_precision(device, cfg.precision)):
        val_scores = score(val_cases)
        test_scores = score([preprocess(c, plan, fp) for c in fold.test], each=masks, natives=fold.test)  # once
    views = ", mirrored views" if cfg.tta and plan["flip_axes"] else ""
    for part, scores in (("validation", val_scores), ("test", test_scores)):
        run.log(f"{tag}{part} (whole cases, sliding windows{views}): "
                + " ".join(f"{k}={v:.4f}" for k, v in summarize(scores, data.classes).items()))
    export_safetensors(final_model, run.dir / inference.weights_name(index),
                       metadata={"recipe": run.spec.name, "plan": json.dumps(plan), "fold": str(index)})
    saved = {"weights": inference.weights_name(index), "plan": plan, "fingerprint": fp}
    return val_scores, test_scores, {**result.stats(), **start}, (saved, masks)


def record_split(run, data: SegData, folds: list[Fold]) -> None:
    """``split.csv`` (each case once: its part, or the fold it is tested in) and the leaderboard's split line."""
    if len(folds) == 1:
        (fold,) = folds
        run.record_split({"train": [c.key for c in fold.train], "validation": [c.key for c in fold.val],
                          "test": [c.key for c in fold.test], **({"unused": [c.key for c in fold.unused]}
                                                                 if fold.unused else {})})
        run.report("split", f"{data.name}: {len(fold.train)} train / {len(fold.val)} validation / {len(fold.test)} "
                            "test cases by a hash of each case's path (or name)"
                            + (f"; {len(fold.unused)} training cases left out (train_cases)" if fold.unused else ""))
        return
    run.record_split({f"test fold {k}": [c.key for c in fold.test] for k, fold in enumerate(folds)})
    sizes = sorted({len(f.test) for f in folds})
    run.report("split", f"{data.name}: {len(folds)}-fold cross-validation of {len(data.cases)} cases by a hash of "
                        f"each case's path ({'-'.join(map(str, sizes))} test cases a fold; of the rest "
                        f"{len(folds[0].val)} validation by hash, per fold"
                        + (f", {len(folds[0].train)} training (train_cases)" if folds[0].unused else "")
                        + "); test_dice = mean over folds")


# precision=auto on a CPU: fp32 (bf16 under the 1.3x rule, then worse validation after the sizing refit:
# docs/LOG.md#2026-12-03-cpu-sizing-per-dtype, docs/LOG.md#2026-12-04-medical-unet-bf16-after-refit).
# compile: faster warm on ISBI (docs/LOG.md#2026-12-04-cpu-compile-diffusion-medical); the default is none (auto):
# docs/LOG.md#2026-12-04-compile-auto-from-5-minutes. medical/swinunetr: fp32 too (bf16 not 1.3x faster:
# docs/LOG.md#2026-12-04-cpu-precision-tabular-mlp-swinunetr).
@recipe("medical/unet", config=MedicalConfig, benchmark="isbi2012-membrane", metric="test_dice", budget="60s",
        summary="self-configuring 2-D/3-D segmentation: MONAI UNet, DiceCE, patches, sliding windows, Dice + mIoU",
        predict=segment, predict_options=MedicalPredictOptions, hooks={"size": size_hook})
@recipe("medical/swinunetr", config=MedicalConfig, benchmark="isbi2012-membrane", metric="test_dice", budget="60s",
        summary="the same pipeline on MONAI SwinUNETR (3-D volumes, or 2-D), AdamW 1e-3",
        defaults={"model": "swinunetr", "lr": 1e-3, "weight_decay": 1e-2, "compile": False}, predict=segment,
        predict_options=MedicalPredictOptions, hooks={"size": size_hook})
def train(cfg: MedicalConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device, tf32=cfg.tf32)
    data = load_data(cfg.data, cfg.label_values)
    folds = split_cases(data, cfg.folds, cfg.val_fraction, cfg.test_fraction, cfg.train_cases)
    record_split(run, data, folds)
    if run.inspecting:  # the doctor sees fold 0's training and validation cases, never a test case
        train_view, val_view = inspect_view(folds[0].train, folds[0].val)
        run.inspect(train=train_view, val=val_view, task="segmentation", num_classes=len(data.classes),
                    fine_tune=bool(cfg.weights))
    source = finetune.read_source(cfg.weights, ("medical/unet", "medical/swinunetr")) if cfg.weights else None
    if source is not None:
        check_source(cfg, data, folds, source, run.log)
    measure = network_cost(network(cfg), data.cases[0].image.shape[0], len(data.classes))
    budget = Budget(run.budget.kind, run.budget.amount / len(folds))  # split evenly over the folds
    cfg = with_compile(cfg, budget, run.log)
    per_fold, pooled, stats, models, rows = [], [], [], [], []
    for k, fold in enumerate(folds):
        part = run if len(folds) == 1 else run.part(budget, main=k == 0)
        tag = f"fold {k}: " if len(folds) > 1 else ""
        val_scores, test_scores, fold_stats, (saved, masks) = train_fold(cfg, part, data, fold, k, tag, device,
                                                                         measure, source)
        models.append(saved)
        rows += masks.rows(test_scores["dice"], data.classes, k if len(folds) > 1 else None)
        val, test = summarize(val_scores, data.classes), summarize(test_scores, data.classes)
        per_fold.append({**{f"test_{m}": v for m, v in test.items()}, "val_dice": val["dice"], "val_miou": val["miou"]})
        pooled.append(test_scores["dice"])
        stats.append(fold_stats)
    metrics = summarize_folds(per_fold, run.log)
    dice = np.concatenate(pooled)  # every case tested once: the interval is over all test cases
    low, high = items.test_interval(dice_items(dice))
    inference.save_card(run, cfg, data, models, rows, device,
                        finetune.provenance(source) if source is not None else None)
    overlays.draw_cases(run, data, rows)  # cases.png: the worst and best test cases (not with ZOO_PLOTS=0)
    totals = {k: sum(s[k] for s in stats) for k in ("train_seconds", "steps", "epochs")}
    return {**stats[0], **totals, "peak_mem_mb": max(s["peak_mem_mb"] for s in stats), **metrics,
            "test_dice_ci_low": low, "test_dice_ci_high": high}
