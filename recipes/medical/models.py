"""Medical networks and loss, all MONAI's: the UNet (residual units), BasicUNet and SwinUNETR, the
cross-entropy class weights, and the Dice + cross-entropy family of losses.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.medical.data import parse_floats

# =============================================================================================
# Network and loss (MONAI)
# =============================================================================================

@dataclass(frozen=True)
class Network:
    """Which network, and what the recipe sets of its shape and layout (the plan sets dims, width and levels)."""
    model: str  # unet, basicunet or swinunetr
    res_units: int  # residual units per level (unet)
    full_res: bool  # unet: a full-resolution first level
    norm: str  # the unet's normalisation layers: instance or batch
    channels_last: bool  # NHWC memory layout for 2-D networks

    def layout(self, dims: int) -> torch.memory_format:
        return torch.channels_last if self.channels_last and dims == 2 else torch.contiguous_format


def build_model(net: Network, dims: int, in_channels: int, classes: int, width: int, levels: int) -> nn.Module:
    from monai.networks import nets

    if net.model == "unet":
        channels = [min(width * 2 ** i, 16 * width) for i in range(levels)]
        strides = [2] * (levels - 1)
        if net.full_res:
            channels, strides = [width] + channels, [1] + strides
        return nets.UNet(dims, in_channels, classes, channels=channels, strides=strides,
                         num_res_units=net.res_units, norm=net.norm)
    if net.model == "basicunet":  # MONAI's fixed five-level U-Net (two convolutions per level)
        w = width
        return nets.BasicUNet(dims, in_channels, classes, features=(w, w, 2 * w, 4 * w, 8 * w, w))
    if net.model == "swinunetr":
        return nets.SwinUNETR(in_channels, classes, feature_size=swin_features(width), spatial_dims=dims)
    raise ZooError(f"model={net.model!r}: choose unet, basicunet or swinunetr")


def swin_features(width: int) -> int:
    """SwinUNETR's feature size: 1.5 x width, a multiple of 12 (its heads need it)."""
    return 12 * max(1, round(width * 1.5 / 12))


def class_weights(spec: str, fp: dict, classes: int) -> torch.Tensor | None:
    """``spec``: '' (none), 'balanced' or 'w0,w1,...' (the recipe's ``class_weights``)."""
    if not spec:
        return None
    if spec == "balanced":  # inverse square root of the voxel fraction, mean 1
        frac = torch.tensor(list(fp["class_fraction"].values())).clamp(min=1e-6)
        w = frac.rsqrt()
        return w * classes / w.sum()
    values = parse_floats(spec, "class_weights")
    if len(values) != classes:
        raise ZooError(f"class_weights={spec!r}: needs {classes} values, one per class")
    return torch.tensor(values)


def build_loss(loss: str, weights: torch.Tensor | None) -> nn.Module:
    """Dice is computed over the whole batch and over foreground classes (nnU-Net's batch Dice)."""
    from monai import losses

    common = dict(to_onehot_y=True, softmax=True, include_background=False, batch=True)
    if loss == "dice_ce":
        return losses.DiceCELoss(**common, weight=weights)
    if loss == "dice_focal":
        return losses.DiceFocalLoss(**common, weight=weights)
    if loss == "tversky":
        return losses.TverskyLoss(**common, alpha=0.3, beta=0.7)
    if loss == "ce":
        ce = nn.CrossEntropyLoss(weight=weights)
        return lambda logits, y: ce(logits, y[:, 0])
    raise ZooError(f"loss={loss!r}: choose dice_ce, dice_focal, tversky or ce")
