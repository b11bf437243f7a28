"""Contrastive networks: the shared image backbones (``recipe_zoo.recipes.backbones``) without their classifier,
the MLP projection head (and BYOL's predictor), and BYOL's EMA target network."""
from __future__ import annotations

import copy
import math
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes import backbones, image_files

# =============================================================================================
# Networks
# =============================================================================================

def build_backbone(cfg, channels: int, size: int) -> tuple[nn.Module, int]:
    """The image backbones without their classifier: (module mapping images to features, feature width).
    ``cfg``: the recipe's config (its ``model`` and ``width``; ``weights``, a run or file to start from, if any)."""
    model, head = backbones.build_model(cfg.model, cfg.width, getattr(cfg, "weights", ""), channels, 1, size)
    if cfg.model in backbones.OWN_MODELS:
        setattr(model, head, nn.Identity())
        if isinstance(model, backbones.ZooNet):
            model.logit_scale = 1.0
    else:
        model.reset_classifier(0)
    with torch.no_grad():
        dim = model.eval()(torch.zeros(2, channels, size, size)).shape[-1]
    return model.train(), dim


@torch.no_grad()
def check_views(backbone: nn.Module, channels: int, view: int, name: str) -> None:
    """A view size the backbone cannot take (too small for its downsampling) is one line, not a traceback."""
    try:
        backbone.eval()(torch.zeros(2, channels, view, view))
    except RuntimeError as e:
        raise ZooError(f"view_size={view}: the {name} backbone cannot take views this small "
                       f"({str(e).splitlines()[0]})") from None
    finally:
        backbone.train()


def mlp(dim_in: int, hidden: int, dim_out: int) -> nn.Sequential:
    """Linear-BN-ReLU-Linear: SimCLR's projection head, BYOL's projector and predictor."""
    return nn.Sequential(nn.Linear(dim_in, hidden, bias=False), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
                         nn.Linear(hidden, dim_out))


class SSLModel(nn.Module):
    """The backbone plus what training needs and evaluation discards (head, predictor, target)."""

    def __init__(self, backbone: nn.Module, projector: nn.Module, predictor: nn.Module | None = None):
        super().__init__()
        self.backbone, self.projector, self.predictor = backbone, projector, predictor
        self.target = None
        if predictor is not None:  # BYOL: an EMA copy of backbone + projector, never trained by gradients
            self.target = copy.deepcopy(nn.Sequential(backbone, projector)).requires_grad_(False)

    def forward(self, x: torch.Tensor, predict: bool = False) -> torch.Tensor:
        """The projection, or with ``predict`` BYOL's prediction of it (one forward, as DDP needs)."""
        z = self.projector(self.backbone(x))
        return self.predictor(z) if predict else z


def byol_momentum(base: float, progress: float) -> float:
    """BYOL's schedule: 1 - (1 - base)(cos(pi progress) + 1)/2, from base at the start to 1 at the end."""
    return 1 - (1 - base) * (math.cos(math.pi * min(max(progress, 0.0), 1.0)) + 1) / 2


@torch.no_grad()
def update_target(model: SSLModel, momentum: float) -> None:
    online = nn.Sequential(model.backbone, model.projector).state_dict()
    for name, t in model.target.state_dict().items():
        if t.dtype.is_floating_point:
            t.lerp_(online[name], 1 - momentum)
        else:
            t.copy_(online[name])


def load_backbone(card: dict, path, device="cpu") -> nn.Module:
    """A run's backbone (``model.safetensors``) as its card describes it, built as training built it, the weights
    loaded strictly, in eval mode and the run's memory format."""
    from safetensors.torch import load_model

    arch, pre = card["architecture"], card["preprocess"]
    backbone, _ = build_backbone(SimpleNamespace(model=arch["model"], width=arch["width"]), pre["channels"],
                                 pre["image_size"])
    try:
        load_model(backbone, str(path))
    except (RuntimeError, OSError) as exc:  # another shape, missing keys, a damaged file
        raise ZooError(f"{path}: does not fit the {arch['model']} backbone model.json describes "
                       f"({str(exc).splitlines()[0][:160]})") from None
    memory_format = torch.channels_last if arch["channels_last"] else torch.contiguous_format
    return backbone.to(device=device, memory_format=memory_format).eval()


def export_timm(cfg, run, out: Path) -> list[Path]:
    """A timm backbone as a timm model folder (``image_files.timm_folder``): no classifier, so it gives the
    embeddings."""
    return image_files.timm_folder(run.card, lambda: load_backbone(run.card, run.path("model.safetensors")), out,
                                   "safetensors")
