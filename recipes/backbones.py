"""The image domains' networks: the from-scratch backbones (``zoo-net``, ``zoo-resnet``), model building (those or any
timm model, from scratch or from pretrained weights) and the input-statistics rule. The images themselves are in
``recipe_zoo.recipes.images``.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import artifact
from recipe_zoo.core.checkpoint import read_weights
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.image_streams import channel_stats

# =============================================================================================
# Networks: the from-scratch backbones
# =============================================================================================

def shift_norm(channels: int) -> nn.BatchNorm2d:
    """BatchNorm whose scale stays 1: only the shift is learned (airbench; fewer, better-behaved params)."""
    norm = nn.BatchNorm2d(channels, eps=1e-12, momentum=0.4)
    norm.weight.requires_grad_(False)
    return norm


def conv3x3(c_in: int, c_out: int) -> nn.Conv2d:
    conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
    with torch.no_grad():
        nn.init.dirac_(conv.weight[:min(c_in, c_out)])  # the first filters start as identity maps
    return conv


class ConvGroup(nn.Module):
    """conv - pool - norm - GELU - conv - norm - GELU; pooling first keeps the second conv cheap."""

    def __init__(self, c_in: int, c_out: int, pool: bool):
        super().__init__()
        self.conv1, self.norm1 = conv3x3(c_in, c_out), shift_norm(c_out)
        self.pool = nn.MaxPool2d(2) if pool else nn.Identity()
        self.conv2, self.norm2 = conv3x3(c_out, c_out), shift_norm(c_out)

    def forward(self, x):
        x = F.gelu(self.norm1(self.pool(self.conv1(x))))
        return F.gelu(self.norm2(self.conv2(x)))


class ZooNet(nn.Module):
    """The default from-scratch network, shaped for small images and CPU budgets (after airbench94).

    A frozen 2x2 patch-whitening stem, then one ConvGroup per width (w, 2w, 4w), global max-pool and
    a linear head whose logits are scaled down by 1/9. On 2 CPU cores a 32/64/128 net trains ~20
    epochs of cifar10-subset in 5 minutes, which beats wider nets that see fewer epochs.
    """

    def __init__(self, in_channels: int, num_classes: int, width: int, image_size: int, logit_scale: float = 1 / 9):
        super().__init__()
        self.whiten = nn.Conv2d(in_channels, 2 * in_channels * 4, 2, bias=True)
        self.whiten.weight.requires_grad_(False)
        size, c, groups = image_size - 1, self.whiten.out_channels, []
        for w in (width, 2 * width, 4 * width):
            groups.append(ConvGroup(c, w, pool=size > 1))
            size, c = max(1, size // 2), w
        self.groups = nn.Sequential(*groups)
        self.head = nn.Linear(c, num_classes, bias=False)
        self.logit_scale = logit_scale

    @torch.no_grad()
    def init_whitening(self, x: torch.Tensor, eps: float = 5e-4) -> None:
        """Stem filters = eigenvectors of the 2x2 patch covariance / sqrt(eigenvalue), in +/- pairs. Computed on the
        CPU whatever ``x``'s device (the same filters on a GPU as on a CPU; once, at initialisation)."""
        c, k = x.shape[1], self.whiten.kernel_size[0]
        cov, count = torch.zeros(c * k * k, c * k * k, dtype=torch.float64), 0
        step = max(1, 256 * 32 * 32 // (x.shape[-1] * x.shape[-2]))  # the patches of 256 images of 32 px at a time
        for i in range(0, len(x), step):  # summed in float64
            chunk = x[i:i + step].cpu().float().unfold(2, k, 1).unfold(3, k, 1)
            patches = chunk.permute(0, 2, 3, 1, 4, 5).reshape(-1, c * k * k)
            cov, count = cov + (patches.T @ patches).double(), count + len(patches)
        evals, evecs = torch.linalg.eigh((cov / count).float())
        filters = (evecs.T / (evals + eps).sqrt().unsqueeze(1)).reshape(-1, c, k, k)
        self.whiten.weight.copy_(torch.cat((filters, -filters)))

    def forward(self, x):
        x = self.groups(F.gelu(self.whiten(x)))  # (B, 4w, h, w)
        return self.head(torch.amax(x, dim=(2, 3))) * self.logit_scale


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.GELU())


class Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(channels, channels), conv_bn(channels, channels))

    def forward(self, x):
        return x + self.body(x)


class ZooResNet(nn.Module):
    """A compact residual net (DAWNBench ResNet-9 shape): stem, then per stage conv-pool(-residual pair).

    Widths w, 2w, 4w; max-pool only while the feature map is larger than 1x1, so 8x8 inputs work too.
    """

    def __init__(self, in_channels: int, num_classes: int, width: int, image_size: int):
        super().__init__()
        layers, size, c = [conv_bn(in_channels, width)], image_size, width
        for i, w in enumerate((width, 2 * width, 4 * width)):
            layers.append(conv_bn(c, w))
            if size > 1:
                layers.append(nn.MaxPool2d(2))
                size //= 2
            if i != 1:
                layers.append(Residual(w))
            c = w
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.head(torch.amax(self.features(x), dim=(2, 3)))


OWN_MODELS = {"zoo-net": ZooNet, "zoo-resnet": ZooResNet}


# =============================================================================================
# Model building: own backbones or timm models, from scratch or from pretrained weights
# =============================================================================================

def build_model(name: str, width: int, weights: str, in_channels: int, num_classes: int,
                image_size: int, keep_head: bool = False) -> tuple[nn.Module, str]:
    """``name``: zoo-net, zoo-resnet or a timm model; ``width``: the own backbones' first-group channels;
    ``weights``: a file or run folder, 'hub' (timm's hub) or '' (from scratch); ``keep_head``: an own backbone's
    source head is loaded too (the same classes), else it starts afresh.
    Returns the model and the name of its classifier module."""
    if name in OWN_MODELS:
        model = OWN_MODELS[name](in_channels, num_classes, width, image_size)
        if weights:
            _load_own_weights(model, weights, name, keep_head)
        return model, "head"
    import timm

    if name not in timm.list_models():
        import difflib

        near = difflib.get_close_matches(name, timm.list_models(), n=1)
        raise ZooError(f"model={name!r}: not a timm model" + (f"; did you mean {near[0]!r}?" if near else ""))
    kwargs = dict(num_classes=num_classes, in_chans=in_channels)
    if weights == "hub":
        try:
            model = timm.create_model(name, pretrained=True, **kwargs)
        except Exception as exc:  # offline, or no pretrained tag: say what to do instead
            raise ZooError(f"weights=hub: cannot get pretrained {name} from the timm hub ({type(exc).__name__}); "
                           "download them elsewhere and pass weights=PATH") from None
    elif weights:
        path = Path(weights)
        if not path.exists():
            raise ZooError(f"weights={weights}: file or folder not found")
        file = path / "model.safetensors" if path.is_dir() else path
        import pickle

        from safetensors import SafetensorError

        try:
            model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": str(file)},
                                      **kwargs)
        except (RuntimeError, OSError, KeyError, ValueError, EOFError, pickle.UnpicklingError, SafetensorError) as exc:
            raise ZooError(f"weights={file}: cannot read weights into {name} "
                           f"({str(exc).splitlines()[0][:160]})") from None
    else:
        model = timm.create_model(name, **kwargs)
    if image_size <= 64 and hasattr(model, "conv1") and hasattr(model, "maxpool"):
        # ResNet family on small images: a 3x3 stride-1 stem and no max-pool keep spatial detail.
        # the stem's output width is what bn1 normalises (a deep stem's first conv can be narrower)
        out = model.bn1.num_features if isinstance(getattr(model, "bn1", None), nn.BatchNorm2d) else (
            model.conv1.out_channels if isinstance(model.conv1, nn.Conv2d) else model.conv1[-1].out_channels)
        if not weights:
            model.conv1 = nn.Conv2d(in_channels, out, 3, padding=1, bias=False)
        model.maxpool = nn.Identity()
    return model, model.pretrained_cfg.get("classifier", "fc")


def _read_state(file: Path) -> dict:
    """A state dict from a .safetensors file or a torch checkpoint (its ``model`` entry), tensors only."""
    blob = read_weights(file, key="weights")
    state = blob.get("model", blob) if isinstance(blob, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ZooError(f"weights={file}: cannot read weights (not a state dict of tensors)")
    return state


def source_channels(name: str, weights: str) -> int | None:
    """The image channels a zoo-net / zoo-resnet source (a run folder or weights file) was trained on: its stem's
    input channels; None for a timm model, no weights, or a file that is not one of these."""
    if name not in OWN_MODELS or not weights:
        return None
    file = Path(weights)
    file = file / "model.safetensors" if file.is_dir() else file
    if not file.is_file():
        return None  # build_model says it is missing
    stem = next(k for k, v in OWN_MODELS[name](1, 2, 8, 32).state_dict().items() if v.ndim == 4)
    tensor = _read_state(file).get(stem)
    return int(tensor.shape[1]) if tensor is not None and tensor.ndim == 4 else None


def source_classes(weights: str) -> list[str] | None:
    """The classes a zoo run folder's classifier was trained on (its card's); None for a file, another folder or
    a run without a classifier head (a contrastive backbone)."""
    if not weights or not (Path(weights) / artifact.CARD).is_file():
        return None
    card = artifact.read_card(weights)
    return card.get("classes") if card.get("task") == "classification" else None


def _load_own_weights(model: nn.Module, path: str, name: str, keep_head: bool = False) -> None:
    """Weights from a previous zoo run (model.safetensors or checkpoint.pt); the head is re-initialised unless
    ``keep_head``."""
    file = Path(path)
    file = file / "model.safetensors" if file.is_dir() else file
    if not file.is_file():
        raise ZooError(f"weights={path}: file not found")
    state = _read_state(file)
    if not keep_head:
        state = {k: v for k, v in state.items() if not k.startswith("head.")}
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatch: another width or channel count
        raise ZooError(f"weights={file}: does not fit {name} ({str(exc).splitlines()[-1].strip()})") from None
    if unexpected or [k for k in missing if not k.startswith("head.")]:
        raise ZooError(f"weights={file}: does not fit {name} (unexpected {unexpected[:3]}, missing {missing[:3]})")


def input_stats(train_x: torch.Tensor, model: nn.Module | None = None, name: str = "",
                weights: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """Pretrained models use their own normalisation; from-scratch models the training set's (``train_x``: uint8
    images in memory or streamed; ``image_streams.channel_stats``). ``model``, ``name`` and ``weights`` as built by
    ``build_model``; without them: the training set's."""
    if weights and name not in OWN_MODELS:
        pc = model.pretrained_cfg
        return torch.tensor(pc["mean"]), torch.tensor(pc["std"])
    mean, std = channel_stats(train_x)
    return mean, std.clamp(min=1e-3)
