"""Vision's model helpers beyond the shared backbones (``recipe_zoo.recipes.images``): the layer groups of a
backbone, which fine-tuning uses for layer-wise LR decay and for unfreezing only its top."""
from __future__ import annotations

from torch import nn


def layer_groups(model: nn.Module, head: str) -> dict[str, int]:
    """Layer id per parameter name (0 = input side), from timm's grouping of the model's blocks."""
    from timm.optim import param_groups_layer_decay

    groups = param_groups_layer_decay(model, weight_decay=0.0, layer_decay=0.5)
    layer_of = {}
    for g in groups:
        names = [n for n, p in model.named_parameters() if any(p is q for q in g["params"])]
        scale = g["lr_scale"]
        for n in names:
            layer_of[n] = scale
    ranks = {s: i for i, s in enumerate(sorted(set(layer_of.values())))}
    return {n: ranks[s] for n, s in layer_of.items()}

