"""What the network trains on: random patches of the preprocessed cases with MONAI's augmentation, seeded per batch
so a resumed run replays them exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from recipe_zoo.core.batches import batch_seed
from recipe_zoo.recipes.medical.preprocess import Case


@dataclass(frozen=True)
class Augmentation:
    """How patches are cut and varied (the recipe's fields of the same names)."""
    fg_fraction: float  # fraction of patches centred on a foreground voxel
    rotate: float  # max rotation in degrees (in-plane for 2-D); 0 = off
    zoom: float  # max relative zoom
    spatial_prob: float  # probability of the rotation/zoom per patch
    elastic: bool  # elastic deformation in place of the affine one
    intensity: float  # random intensity scaling and shift (fraction of one std); 0 = off
    noise: float  # Gaussian noise std (in std units); 0 = off


def augmentation(aug: Augmentation, plan: dict, flip_axes: tuple[int, ...]):
    """The patch pipeline (MONAI Compose) and the crop size it starts from (the patch plus a margin
    when rotation or zoom will cut the patch out of it)."""
    from monai import transforms as T

    keys, patch, dims = ["image", "label"], plan["patch"], plan["dims"]
    spatial = aug.spatial_prob > 0 and (aug.rotate > 0 or aug.zoom > 0 or aug.elastic)
    crop = [int(math.ceil(p * 1.25)) for p in patch] if spatial else patch  # margin for rotation and zoom
    pos = aug.fg_fraction / max(1e-6, 1 - aug.fg_fraction)
    steps = [T.RandCropByPosNegLabeld(keys, "label", crop, pos=pos if aug.fg_fraction < 1 else 1.0,
                                      neg=1.0 if aug.fg_fraction < 1 else 0.0, num_samples=1,
                                      fg_indices_key="fg", bg_indices_key="bg")]
    if spatial:
        angle = math.radians(aug.rotate)
        rotate = (angle,) if dims == 2 else (angle, angle, angle)
        common = dict(spatial_size=patch, prob=aug.spatial_prob, rotate_range=rotate, scale_range=aug.zoom,
                      mode=("bilinear", "nearest"), padding_mode="zeros")
        if aug.elastic and dims == 2:
            steps.append(T.Rand2DElasticd(keys, spacing=[p // 4 for p in patch], magnitude_range=(1, 2), **common))
        elif aug.elastic:
            steps.append(T.Rand3DElasticd(keys, sigma_range=(5, 8), magnitude_range=(50, 150), **common))
        else:
            steps.append(T.RandAffined(keys, **common))
    for axis in flip_axes:
        steps.append(T.RandFlipd(keys, prob=0.5, spatial_axis=axis))
    square = [a for a in flip_axes if patch[a] == patch[flip_axes[0]]]
    if len(square) >= 2:  # a right angle is as symmetric as a flip when both axes are
        steps.append(T.RandRotate90d(keys, prob=0.5, max_k=3, spatial_axes=tuple(square[:2])))
    if aug.intensity > 0:
        steps += [T.RandScaleIntensityd("image", factors=aug.intensity, prob=0.5),
                  T.RandShiftIntensityd("image", offsets=aug.intensity, prob=0.5)]
    if aug.noise > 0:
        steps.append(T.RandGaussianNoised("image", prob=0.15, std=aug.noise))
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
        """Under N processes ``index`` is the step's position in the epoch counted in slots and rank r draws
        the patches of slot ``index + r``: a step's N micro-batches are the slots one process accumulating N
        micro-batches draws, across an epoch boundary too (a slot past the epoch's end is the matching slot
        of the next epoch, with that epoch's seed) rather than dropping the slots that do not divide by N."""
        self.rank, self.world = rank, world

    @property
    def batches_per_epoch(self) -> int:
        return max(1, self.slots_per_epoch // self.world)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        per_epoch = self.slots_per_epoch
        if self.index >= per_epoch:
            self.epoch, self.index = self.epoch + self.index // per_epoch, self.index % per_epoch
        ahead, slot = divmod(self.index + self.rank, per_epoch)  # ahead > 0: this slot opens a later epoch
        epoch = self.epoch + ahead
        seed = batch_seed(self.seed, epoch, slot) % 2**32  # MONAI's random states take 32 bits
        rng = np.random.default_rng(seed)
        self.transform.set_random_state(seed=seed)
        samples = [self.transform(self.items[i])[0] for i in rng.integers(0, len(self.items), self.batch_size)]
        self.index += self.world
        x = torch.stack([torch.as_tensor(s["image"]).as_subclass(torch.Tensor) for s in samples])
        y = torch.stack([torch.as_tensor(s["label"]).as_subclass(torch.Tensor) for s in samples])
        return x.float(), y.long()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
