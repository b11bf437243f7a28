"""Preprocessing to the plan, as training and ``zoo predict`` both read a case: resampled to the plan's spacing,
normalised, and cut into 2-D slices when a 2-D network trains on volumes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from recipe_zoo.recipes.medical.data import RawCase


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
