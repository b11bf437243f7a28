"""Medical networks and loss, all MONAI's: the UNet (residual units), BasicUNet and SwinUNETR, the
cross-entropy class weights, and the Dice + cross-entropy family of losses.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.medical.data import parse_floats

if TYPE_CHECKING:
    from recipe_zoo.recipes.medical.unet import MedicalConfig

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
