"""Medical imaging: self-configuring 2-D / 3-D segmentation on MONAI (``medical/unet``, ``medical/swinunetr``).

Reads top to bottom: config, data (loading, checks, label mapping), fingerprint and plan (the
nnU-Net idea: derive the configuration from the data, here also from the compute budget),
preprocessing, augmentation, network, loss, sliding-window evaluation, training.
Networks, transforms, losses, the sliding-window inferer and the metrics are MONAI's own.
"""
from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import distributed, optim, schedule
from recipe_zoo.core.batches import batch_seed
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import recipe

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
# Data: raw cases, checked and mapped to class indices
# =============================================================================================

IMAGE_SUFFIXES = (".nii.gz", ".nii", ".png", ".tif", ".tiff", ".jpg", ".jpeg", ".bmp", ".mha", ".nrrd")


@dataclass
class RawCase:
    name: str
    image: np.ndarray  # (C, *spatial) float32
    label: np.ndarray  # (1, *spatial) class indices (uint8)
    spacing: tuple[float, ...]
    source: str = ""  # image file, for error messages


@dataclass
class SegData:
    train: list[RawCase]
    val: list[RawCase]
    classes: list[str]  # index 0 = background
    name: str
    symmetric_axes: tuple[int, ...] = ()
    modality: str = ""  # e.g. CT / MRI from dataset.json


def _stem(path: Path) -> str:
    name = path.name
    for suffix in IMAGE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return path.stem


def read_image(path: Path):
    """(C, *spatial) float32 array and spacing, through MONAI's readers (NIfTI, PNG, TIFF, ...)."""
    from monai.transforms import LoadImage

    if not path.is_file():
        raise ZooError(f"{path}: file not found")
    try:
        image = LoadImage(image_only=True, ensure_channel_first=True)(str(path))
    except Exception as exc:  # each reader raises its own error type for a corrupt file
        raise ZooError(f"{path}: cannot read image ({str(exc).splitlines()[0][:160]})") from None
    spacing = tuple(float(s) for s in image.pixdim)[:image.ndim - 1]
    return np.asarray(image, dtype=np.float32), spacing


def check_label(label: np.ndarray, path: Path, image_shape: tuple, image_path: Path) -> np.ndarray:
    """One channel of whole numbers with the image's spatial shape."""
    if label.shape[0] > 1:
        if not all(np.array_equal(label[0], c) for c in label[1:]):
            raise ZooError(f"{path}: mask has {label.shape[0]} different channels; expected one label channel")
        label = label[:1]
    if label.shape[1:] != tuple(image_shape[1:]):
        raise ZooError(f"{path}: mask shape {label.shape[1:]} does not match image {image_path.name} "
                       f"shape {tuple(image_shape[1:])}")
    if not np.all(np.isfinite(label)) or not np.array_equal(label, np.round(label)):
        raise ZooError(f"{path}: mask values are not whole numbers (is this an image rather than a mask?)")
    return label


def map_labels(labels: list[np.ndarray], values: list[int] | None,
               paths: list[Path]) -> tuple[list[np.ndarray], list[int]]:
    """Mask values -> class indices 0..K-1 (``values`` in class order); a value outside it names its file."""
    if values is None:
        uniques = [np.unique(label) for label in labels]
        found = sorted({int(v) for u in uniques for v in u})
        if len(found) > 32:
            worst = max(range(len(labels)), key=lambda i: len(uniques[i]))
            raise ZooError(f"{paths[worst]}: mask holds {len(uniques[worst])} distinct values ({len(found)} across "
                           "the masks); a segmentation mask holds class values: give label_values=... or check "
                           "the mask folder")
        values = found
    known = np.array(values)
    order = np.argsort(known)
    mapped = []
    for label, path in zip(labels, paths):
        present = np.unique(label)
        bad = present[~np.isin(present, known)]
        if bad.size:
            raise ZooError(f"{path}: unexpected label value {int(bad[0])} (expected one of {values})")
        mapped.append(order[np.searchsorted(known[order], label)].astype(np.uint8))
    return mapped, values


def parse_ints(text: str, key: str) -> list[int] | None:
    if not text or text == "auto":
        return None
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise ZooError(f"{key}={text!r}: expected comma-separated whole numbers") from None


def parse_floats(text: str, key: str) -> list[float] | None:
    if not text:
        return None
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise ZooError(f"{key}={text!r}: expected comma-separated numbers") from None
    if any(v <= 0 or not math.isfinite(v) for v in values):
        raise ZooError(f"{key}={text!r}: values must be positive")
    return values


def load_pairs(images: list[Path], labels: list[Path], values: list[int] | None) -> tuple[list[RawCase], list[int]]:
    pairs = []
    for image_path, label_path in zip(images, labels):
        image, spacing = read_image(image_path)
        bad = int((~np.isfinite(image)).sum())
        if bad:
            raise ZooError(f"{image_path}: {bad} voxels are NaN or infinite")
        label, _ = read_image(label_path)
        pairs.append((image, check_label(label, label_path, image.shape, image_path), spacing))
    if not pairs:
        raise ZooError("no image/mask pairs found")
    mapped, values = map_labels([p[1] for p in pairs], values, labels)
    cases = [RawCase(_stem(path), image, label, spacing, str(path))
             for path, (image, _, spacing), label in zip(images, pairs, mapped)]
    channels = [c.image.shape[0] for c in cases]
    if len(set(channels)) > 1:
        usual = max(set(channels), key=channels.count)
        odd = next(c for c in cases if c.image.shape[0] != usual)
        raise ZooError(f"{odd.source}: {odd.image.shape[0]} channel(s), but most images have {usual} "
                       f"(channel counts found: {sorted(set(channels))})")
    return cases, values


def fixed_split(cases: list[RawCase], fraction: float, where: str) -> tuple[list[RawCase], list[RawCase]]:
    n_val = max(1, int(round(fraction * len(cases))))
    if len(cases) < 2 or n_val >= len(cases):
        raise ZooError(f"{where}: {len(cases)} cases are too few to hold out {fraction:.0%} for validation")
    order = np.random.default_rng(0).permutation(len(cases))  # fixed: every run validates on the same cases
    return [cases[i] for i in order[n_val:]], [cases[i] for i in order[:n_val]]


def load_synthetic(dims: int) -> SegData:
    from monai.data.synthetic import create_test_image_2d, create_test_image_3d

    rs = np.random.RandomState(0)  # fixed: the same 40 scenes in every run
    cases = []
    for i in range(40):
        if dims == 2:
            image, label = create_test_image_2d(128, 128, num_objs=12, rad_max=20, rad_min=4, noise_max=0.5,
                                                num_seg_classes=2, channel_dim=0, random_state=rs)
        else:
            image, label = create_test_image_3d(64, 64, 64, num_objs=10, rad_max=14, rad_min=4, noise_max=0.5,
                                                num_seg_classes=2, channel_dim=0, random_state=rs)
        cases.append(RawCase(f"synthetic{i}", image.astype(np.float32), label.astype(np.uint8), (1.0,) * dims))
    return SegData(cases[:32], cases[32:], ["background", "class1", "class2"], f"synthetic-{dims}d",
                   tuple(range(dims)))


def load_isbi(root: Path, values: list[int] | None) -> SegData:
    ids = list(range(30))
    missing = [root / d / f"{i}.png" for i in ids for d in ("image", "label") if not (root / d / f"{i}.png").is_file()]
    if missing:
        raise ZooError(f"{missing[0]}: file not found ({len(missing)} of the 60 ISBI 2012 files are missing)")
    cases, values = load_pairs([root / "image" / f"{i}.png" for i in ids], [root / "label" / f"{i}.png" for i in ids],
                               values or [255, 0])
    names = ["background", "membrane"] if values == [255, 0] else [f"value{v}" for v in values]
    return SegData(cases[:24], cases[24:], names, "isbi2012-membrane", (0, 1))


MASK_DIRS, IMAGE_DIRS = ("masks", "labels", "label", "labelsTr"), ("images", "image", "imagesTr")


def load_msd(root: Path, values: list[int] | None, val_fraction: float) -> SegData:
    """A Decathlon-style folder: dataset.json (MSD or nnU-Net v2 keys), imagesTr/, labelsTr/."""
    try:
        meta = json.loads((root / "dataset.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ZooError(f"{root / 'dataset.json'}: cannot read ({exc})") from None
    if not isinstance(meta, dict):
        raise ZooError(f"{root / 'dataset.json'}: expected a JSON object with 'labels' and 'training'")
    labels = meta.get("labels")
    if not isinstance(labels, dict) or not labels:
        raise ZooError(f"{root / 'dataset.json'}: no 'labels' mapping")
    try:  # MSD: {"0": "background", ...}; nnU-Net v2: {"background": 0, ...}
        by_value = ({int(k): str(v) for k, v in labels.items()} if all(str(k).isdigit() for k in labels)
                    else {int(v): str(k) for k, v in labels.items()})
    except (TypeError, ValueError):
        raise ZooError(f"{root / 'dataset.json'}: 'labels' must map values to names (or names to values)") from None
    if "training" in meta:
        entries = meta["training"]
        if not isinstance(entries, list):
            raise ZooError(f"{root / 'dataset.json'}: 'training' must be a list of {{'image', 'label'}} entries")
        images, masks = [], []
        for number, e in enumerate(entries, 1):
            if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in ("image", "label")):
                raise ZooError(f"{root / 'dataset.json'}: 'training' entry {number} needs 'image' and 'label' paths "
                               f"(got {str(e)[:80]})")
            images.append(root / e["image"])
            masks.append(root / e["label"])
    else:  # nnU-Net v2: imagesTr/<case>_0000.nii.gz and labelsTr/<case>.nii.gz
        masks = sorted((root / "labelsTr").glob("*.nii*"))
        images = [root / "imagesTr" / (_stem(m) + "_0000" + m.name[len(_stem(m)):]) for m in masks]
    for path in images + masks:
        if not path.is_file():
            raise ZooError(f"{path}: listed in dataset.json but not found")
    values = values or sorted(by_value)
    cases, values = load_pairs(images, masks, values)
    modality = meta.get("modality") or meta.get("channel_names") or {}
    modality = str(next(iter(modality.values()), "")) if isinstance(modality, dict) else str(modality)
    train, val = fixed_split(cases, val_fraction, str(root))
    return SegData(train, val, [by_value.get(v, f"value{v}") for v in values], root.name, (), modality)


def load_folder(root: Path, values: list[int] | None, val_fraction: float) -> SegData:
    """``root/images`` (or image/, imagesTr/) and ``root/masks`` (or labels/, label/), matched by file name."""
    image_dir = next((root / d for d in IMAGE_DIRS if (root / d).is_dir()), None)
    mask_dir = next((root / d for d in MASK_DIRS if (root / d).is_dir()), None)
    if image_dir is None or mask_dir is None:
        raise ZooError(f"{root}: expected an images/ and a masks/ (or labels/) folder, or a dataset.json")
    found = {d: {_stem(p): p for p in sorted(d.iterdir()) if p.is_file() and p.name.lower().endswith(IMAGE_SUFFIXES)}
             for d in (image_dir, mask_dir)}
    if not found[image_dir]:
        raise ZooError(f"{image_dir}: no images (png, tif, nii.gz, ...) found")
    for d, other in ((image_dir, mask_dir), (mask_dir, image_dir)):
        lonely = sorted(set(found[d]) - set(found[other]))
        if lonely:
            raise ZooError(f"{found[d][lonely[0]]}: no matching file in {other} ({len(lonely)} unpaired in {d.name}/)")
    stems = sorted(found[image_dir])
    cases, values = load_pairs([found[image_dir][s] for s in stems], [found[mask_dir][s] for s in stems], values)
    train, val = fixed_split(cases, val_fraction, str(root))
    names = ["background"] + [f"class{i}" for i in range(1, len(values))]
    return SegData(train, val, names, root.name)


def load_data(cfg: MedicalConfig, run) -> SegData:
    values = parse_ints(cfg.label_values, "label_values")
    if cfg.data in ("synthetic-2d", "synthetic-3d"):
        return load_synthetic(int(cfg.data[-2]))
    if cfg.data == "isbi2012-membrane":
        return load_isbi(run.data_path("isbi2012-membrane"), values)
    root = Path(cfg.data)
    if not root.exists():
        raise ZooError(f"data={cfg.data!r}: not a medical dataset (synthetic-2d, synthetic-3d, isbi2012-membrane) "
                       "nor an existing folder")
    if not root.is_dir():
        raise ZooError(f"data={cfg.data!r}: expected a folder (dataset.json + imagesTr/labelsTr, or images/ + masks/)")
    if (root / "dataset.json").is_file():
        return load_msd(root, values, cfg.val_fraction)
    return load_folder(root, values, cfg.val_fraction)


def inspect_view(*splits: list[RawCase]) -> list[tuple]:
    """``run.inspect``'s (inputs, labels) per split: the images stacked when every case shares one shape, else
    one content digest per case (exact duplicates still match across splits); the labels as all their voxels."""
    import hashlib

    def digest(image: np.ndarray) -> str:
        h = hashlib.blake2b(str(image.shape).encode(), digest_size=12)
        h.update(np.ascontiguousarray(image))
        return h.hexdigest()

    same = len({c.image.shape for split in splits for c in split}) == 1
    return [(np.stack([c.image for c in split]) if same else [digest(c.image) for c in split],
             np.concatenate([c.label.ravel() for c in split])) for split in splits]


# =============================================================================================
# Fingerprint and plan (nnU-Net's rules, sized for this device and budget)
# =============================================================================================

def fingerprint(data: SegData) -> dict:
    """What the plan is derived from: sizes, spacings, intensities (on foreground), class fractions."""
    rng = np.random.default_rng(0)
    cases = data.train
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
    return levels or int(max(2, min(6, math.floor(math.log2(max(8, min(patch)) / 8)) + 1)))


def _round_up(shape, multiple: int) -> list[int]:
    return [max(multiple, int(math.ceil(s / multiple)) * multiple) for s in shape]


def free_memory(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def make_plan(fp: dict, cfg: MedicalConfig, device: torch.device, budget, measure) -> dict:
    """The configuration, from the fingerprint; every value the user set wins (listed in ``set_by_user``).

    - dims: 2 for images, and for volumes whose coarsest spacing is over 3x the finest (slices then
      run across the coarse axis); else 3.
    - spacing: the median spacing; normalisation: CT clipping + dataset statistics for CT, else per-image z-score.
    - patch: the median image (capped at 1024 px / 160 voxels a side); levels: halve down to ~8 voxels.
    - batch: what fits 40% of free accelerator memory (25% of free RAM on CPU), at most 5% of the
      training voxels per step (nnU-Net), and, with a time budget, no more than leaves ``min_steps``
      steps at the expected rate; when even batch 2 cannot, the patch's longest side is halved.

    ``measure(dims, levels, width) -> (forward FLOPs, activation bytes) per input voxel`` of the network.
    """
    user: list[str] = []

    def pick(key, value, planned):
        if value:
            user.append(key)
            return value
        return planned

    dims = pick("dims", cfg.dims, 2 if fp["spatial_dims"] == 2 or fp["anisotropy"] > 3 else 3)
    if dims not in (2, 3) or dims > fp["spatial_dims"]:
        raise ZooError(f"dims={dims}: the data has {fp['spatial_dims']} spatial dims; use 2 or 3 (at most that)")
    target = parse_floats(cfg.spacing, "spacing")
    if target is not None and len(target) != fp["spatial_dims"]:
        raise ZooError(f"spacing={cfg.spacing!r}: needs {fp['spatial_dims']} values, one per spatial axis")
    spacing = pick("spacing", target, list(fp["median_spacing"]))
    slice_axis = int(np.argmax(spacing)) if dims < fp["spatial_dims"] else None
    normalize = pick("normalize", "" if cfg.normalize == "auto" else cfg.normalize,
                     "ct" if fp["modality"].lower().startswith("ct") else "zscore")
    if normalize not in ("zscore", "ct", "none"):
        raise ZooError(f"normalize={cfg.normalize!r}: choose auto, zscore, ct or none")
    shape = [s * a / b for s, a, b in zip(fp["median_shape"], fp["median_spacing"], spacing)]
    if slice_axis is not None:
        shape.pop(slice_axis)
    width = pick("width", cfg.width, 32 if device.type == "cuda" else 16)
    fixed_patch = parse_ints(cfg.patch, "patch")
    if fixed_patch is not None:
        user.append("patch")
        if len(fixed_patch) != dims or min(fixed_patch) < 8:
            raise ZooError(f"patch={cfg.patch!r}: needs {dims} sizes of at least 8, one per network axis")
    if cfg.batch_size:
        user.append("batch_size")
    patch = list(fixed_patch or [min(s, 1024 if dims == 2 else 160) for s in shape])
    memory = (0.4 if device.type == "cuda" else 0.25) * free_memory(device)
    from recipe_zoo.core.flops import peak_flops

    rate = (cfg.compute_efficiency or (0.3 if device.type == "cuda" else 0.4)) * (peak_flops(device) or 1e11)
    seconds = budget.amount if budget.kind == "seconds" else None
    while True:
        levels = network_levels(patch, cfg.levels)
        multiple = 32 if cfg.model == "swinunetr" else 2 ** (levels - 1)
        smallest = 64 if cfg.model == "swinunetr" else multiple  # Swin's deepest stage is 1/32 of the patch
        if fixed_patch and (any(p % multiple for p in patch) or min(patch) < smallest):
            raise ZooError(f"patch={cfg.patch!r}: sizes must be multiples of {multiple} (at least {smallest}) for "
                           f"{cfg.model}" + (f" with {levels} levels" if cfg.model == "unet" else ""))
        patch = patch if fixed_patch else [max(smallest, p) for p in _round_up(patch, multiple)]
        voxels = math.prod(patch)
        flops, activation_bytes = measure(dims, levels, width)
        sample_flops = 3 * flops * voxels  # forward + backward
        caps = [int(memory // (activation_bytes * voxels)), int(0.05 * fp["total_voxels"] / voxels), 64]
        if seconds:
            caps.append(int(seconds * rate / (cfg.min_steps * sample_flops)))
        batch = cfg.batch_size or max(2, min(caps))
        steps = int(seconds * rate / (batch * sample_flops)) if seconds else None
        short = (steps is not None and steps < cfg.min_steps) or caps[0] < batch
        if fixed_patch or not short or max(patch) <= max(16, smallest):
            break
        axis = int(np.argmax(patch))  # halve the longest side and look again
        patch[axis] = max(multiple, patch[axis] // 2)
    network = {"unet": f"UNet, {levels} levels from width {width}", "basicunet": f"BasicUNet, width {width}",
               "swinunetr": f"SwinUNETR, feature size {swin_features(width)}"}.get(cfg.model, cfg.model)
    return {"dims": dims, "network": network, "spacing": spacing, "slice_axis": slice_axis, "normalize": normalize,
            "width": width, "levels": levels, "patch": patch, "batch_size": batch, "expected_steps": steps,
            "gflop_per_step": round(sample_flops * batch / 1e9, 2), "set_by_user": user}


def describe_plan(plan: dict, fp: dict) -> str:
    steps = f", ~{plan['expected_steps']} steps in the budget" if plan["expected_steps"] else ""
    user = f"; set by you: {', '.join(plan['set_by_user'])}" if plan["set_by_user"] else ""
    return (f"{plan['dims']}-D, patch {'x'.join(map(str, plan['patch']))}, batch {plan['batch_size']}, "
            f"{plan['network']}, spacing {','.join(f'{s:g}' for s in plan['spacing'])}"
            f", {plan['normalize']} normalisation{steps} (median image {'x'.join(map(str, fp['median_shape']))})"
            f"{user}")


# =============================================================================================
# Preprocessing: resample to the plan's spacing, normalise, cut 2-D slices out of volumes
# =============================================================================================

@dataclass
class Case:
    name: str
    image: torch.Tensor  # (C, *spatial) float32, normalised
    label: torch.Tensor  # (1, *spatial) uint8 class index


def preprocess(raw: RawCase, plan: dict, fp: dict) -> Case:
    from monai.transforms import Zoom

    image, label = raw.image, raw.label
    zoom = [a / b for a, b in zip(raw.spacing, plan["spacing"])]
    if any(abs(z - 1) > 0.01 for z in zoom):
        image = np.asarray(Zoom(zoom, mode="area" if min(zoom) < 1 else "trilinear" if len(zoom) == 3 else "bilinear",
                                keep_size=False)(image))
        label = np.asarray(Zoom(zoom, mode="nearest", keep_size=False)(label))
    image = image.astype(np.float32)
    if plan["normalize"] == "zscore":  # per image and channel
        axes = tuple(range(1, image.ndim))
        image = (image - image.mean(axis=axes, keepdims=True)) / np.maximum(image.std(axis=axes, keepdims=True), 1e-6)
    elif plan["normalize"] == "ct":  # clip to the foreground's 0.5-99.5 percentiles, then its mean/std
        stats = fp["intensity_fg"]
        image = (np.clip(image, stats["p00_5"], stats["p99_5"]) - stats["mean"]) / max(stats["std"], 1e-6)
    return Case(raw.name, torch.from_numpy(np.ascontiguousarray(image)), torch.from_numpy(label.astype(np.uint8)))


def slices(case: Case, axis: int) -> list[Case]:
    """2-D training cases from a volume, across ``axis`` (a spatial axis index)."""
    image, label = case.image.movedim(axis + 1, 0), case.label.movedim(axis + 1, 0)
    return [Case(f"{case.name}[{i}]", image[i], label[i]) for i in range(image.shape[0])]


# =============================================================================================
# Patches and augmentation (MONAI transforms, seeded per batch so resume replays them exactly)
# =============================================================================================

def augmentation(cfg: MedicalConfig, plan: dict, flip_axes: tuple[int, ...]):
    """The patch pipeline (MONAI Compose) and the crop size it starts from (the patch plus a margin
    when rotation or zoom will cut the patch out of it)."""
    from monai import transforms as T

    keys, patch, dims = ["image", "label"], plan["patch"], plan["dims"]
    spatial = cfg.spatial_prob > 0 and (cfg.rotate > 0 or cfg.zoom > 0 or cfg.elastic)
    crop = [int(math.ceil(p * 1.25)) for p in patch] if spatial else patch  # margin for rotation and zoom
    pos = cfg.fg_fraction / max(1e-6, 1 - cfg.fg_fraction)
    steps = [T.RandCropByPosNegLabeld(keys, "label", crop, pos=pos if cfg.fg_fraction < 1 else 1.0,
                                      neg=1.0 if cfg.fg_fraction < 1 else 0.0, num_samples=1,
                                      fg_indices_key="fg", bg_indices_key="bg")]
    if spatial:
        angle = math.radians(cfg.rotate)
        rotate = (angle,) if dims == 2 else (angle, angle, angle)
        common = dict(spatial_size=patch, prob=cfg.spatial_prob, rotate_range=rotate, scale_range=cfg.zoom,
                      mode=("bilinear", "nearest"), padding_mode="zeros")
        if cfg.elastic and dims == 2:
            steps.append(T.Rand2DElasticd(keys, spacing=[p // 4 for p in patch], magnitude_range=(1, 2), **common))
        elif cfg.elastic:
            steps.append(T.Rand3DElasticd(keys, sigma_range=(5, 8), magnitude_range=(50, 150), **common))
        else:
            steps.append(T.RandAffined(keys, **common))
    for axis in flip_axes:
        steps.append(T.RandFlipd(keys, prob=0.5, spatial_axis=axis))
    square = [a for a in flip_axes if patch[a] == patch[flip_axes[0]]]
    if len(square) >= 2:  # a right angle is as symmetric as a flip when both axes are
        steps.append(T.RandRotate90d(keys, prob=0.5, max_k=3, spatial_axes=tuple(square[:2])))
    if cfg.intensity > 0:
        steps += [T.RandScaleIntensityd("image", factors=cfg.intensity, prob=0.5),
                  T.RandShiftIntensityd("image", offsets=cfg.intensity, prob=0.5)]
    if cfg.noise > 0:
        steps.append(T.RandGaussianNoised("image", prob=0.15, std=cfg.noise))
    return T.Compose(steps), crop


class PatchBatches:
    """Random patches from whole cases; one "epoch" is as many patch voxels as the training cases hold.

    Every batch draws from a generator seeded by (seed, epoch, index), so the state is a position.
    """

    def __init__(self, cases: list[Case], augment, batch_size: int, patch: list[int], seed: int):
        from monai.transforms import SpatialPad

        transform, crop = augment
        pad = SpatialPad(crop)  # cases smaller than the crop are padded once, before locations are taken
        rng = np.random.default_rng(seed)
        self.items = []
        for c in cases:  # foreground/background locations, at most 10,000 of each per case (nnU-Net)
            image, label = (pad(t).as_subclass(torch.Tensor) for t in (c.image, c.label))
            flat = label[0].numpy().ravel()
            fg, bg = np.flatnonzero(flat), np.flatnonzero(flat == 0)
            fg, bg = (rng.choice(v, size=min(v.size, 10_000), replace=False) if v.size else v for v in (fg, bg))
            self.items.append({"image": image, "label": label, "fg": fg, "bg": bg})
        self.transform, self.batch_size, self.seed = transform, batch_size, seed
        voxels = sum(c.label.numel() for c in cases)
        self.slots_per_epoch = max(1, voxels // (batch_size * math.prod(patch)))
        self.epoch, self.index = 0, 0
        self.rank, self.world = 0, 1

    def shard(self, rank: int, world: int) -> None:
        """Under N processes each rank draws the patches of every N-th slot (slot = index x N + rank)."""
        self.rank, self.world = rank, world

    @property
    def batches_per_epoch(self) -> int:
        return max(1, self.slots_per_epoch // self.world)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.index >= self.batches_per_epoch:
            self.epoch, self.index = self.epoch + 1, 0
        slot = self.index * self.world + self.rank
        seed = batch_seed(self.seed, self.epoch, slot) % 2**32  # MONAI's random states take 32 bits
        rng = np.random.default_rng(seed)
        self.transform.set_random_state(seed=seed)
        samples = [self.transform(self.items[i])[0] for i in rng.integers(0, len(self.items), self.batch_size)]
        self.index += 1
        x = torch.stack([torch.as_tensor(s["image"]).as_subclass(torch.Tensor) for s in samples])
        y = torch.stack([torch.as_tensor(s["label"]).as_subclass(torch.Tensor) for s in samples])
        return x.float(), y.long()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


# =============================================================================================
# Network and loss (MONAI)
# =============================================================================================

def build_model(model: str, dims: int, in_channels: int, classes: int, width: int, levels: int,
                cfg: MedicalConfig) -> nn.Module:
    from monai.networks import nets

    if model == "unet":
        channels = [min(width * 2 ** i, 16 * width) for i in range(levels)]
        strides = [2] * (levels - 1)
        if cfg.full_res:
            channels, strides = [width] + channels, [1] + strides
        return nets.UNet(dims, in_channels, classes, channels=channels, strides=strides,
                         num_res_units=cfg.res_units, norm=cfg.norm)
    if model == "basicunet":  # MONAI's fixed five-level U-Net (two convolutions per level)
        w = width
        return nets.BasicUNet(dims, in_channels, classes, features=(w, w, 2 * w, 4 * w, 8 * w, w))
    if model == "swinunetr":
        return nets.SwinUNETR(in_channels, classes, feature_size=swin_features(width), spatial_dims=dims)
    raise ZooError(f"model={model!r}: choose unet, basicunet or swinunetr")


def swin_features(width: int) -> int:
    """SwinUNETR's feature size: 1.5 x width, a multiple of 12 (its heads need it)."""
    return 12 * max(1, round(width * 1.5 / 12))


def network_cost(cfg: MedicalConfig, in_channels: int, classes: int):
    """``(dims, levels, width) -> (forward FLOPs, activation bytes) per input voxel``, measured once
    on a small input (both grow linearly with the voxels)."""
    from recipe_zoo.core.flops import counting_flops

    cache: dict = {}

    def measure(dims: int, levels: int, width: int) -> tuple[float, float]:
        key = (dims, levels, width)
        if key not in cache:
            model = build_model(cfg.model, dims, in_channels, classes, width, levels, cfg)
            side = max(64 if dims == 2 or cfg.model == "swinunetr" else 32, 2 ** (levels - 1) * 2)
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


def class_weights(cfg: MedicalConfig, fp: dict, classes: int) -> torch.Tensor | None:
    if not cfg.class_weights:
        return None
    if cfg.class_weights == "balanced":  # inverse square root of the voxel fraction, mean 1
        frac = torch.tensor(list(fp["class_fraction"].values())).clamp(min=1e-6)
        w = frac.rsqrt()
        return w * classes / w.sum()
    values = parse_floats(cfg.class_weights, "class_weights")
    if len(values) != classes:
        raise ZooError(f"class_weights={cfg.class_weights!r}: needs {classes} values, one per class")
    return torch.tensor(values)


def build_loss(cfg: MedicalConfig, weights: torch.Tensor | None) -> nn.Module:
    """Dice is computed over the whole batch and over foreground classes (nnU-Net's batch Dice)."""
    from monai import losses

    common = dict(to_onehot_y=True, softmax=True, include_background=False, batch=True)
    if cfg.loss == "dice_ce":
        return losses.DiceCELoss(**common, weight=weights)
    if cfg.loss == "dice_focal":
        return losses.DiceFocalLoss(**common, weight=weights)
    if cfg.loss == "tversky":
        return losses.TverskyLoss(**common, alpha=0.3, beta=0.7)
    if cfg.loss == "ce":
        ce = nn.CrossEntropyLoss(weight=weights)
        return lambda logits, y: ce(logits, y[:, 0])
    raise ZooError(f"loss={cfg.loss!r}: choose dice_ce, dice_focal, tversky or ce")


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
