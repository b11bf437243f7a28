"""Vision: image classification from scratch (``vision/resnet``) and two-stage transfer (``vision/finetune``).

Reads top to bottom: config, data, augmentation, network, optimizer and schedule, evaluation, training.
Images live in memory as uint8 tensors and are augmented in batches, so data loading never starves
the 2-core CPU runs the leaderboard is measured on.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import metrics, optim, schedule
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.diagnose import relative_weight_change, snapshot
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import choose_device, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import recipe

# =============================================================================================
# Config
# =============================================================================================


@dataclass
class VisionConfig(LoopSettings):
    data: str = "digits"  # dataset name (zoo data list) or a folder of class subfolders
    image_size: int = 0  # pixels per side; 0 = the dataset's own size (own folders: 32; finetune: the model's)
    val_fraction: float = 0.2  # held-out fraction when a folder has no val/ or test/ inside
    model: str = "zoo-net"  # zoo-net (whitened stem + 3 conv groups, sized for CPU budgets), zoo-resnet, or a timm name
    width: int = 48  # zoo-net / zoo-resnet channels of the first group (x2, x4 in the next two)
    weights: str = ""  # pretrained weights: a file or folder, 'hub' for the timm hub, '' for none
    optimizer: Literal["sgd", "adamw", "muon"] = "sgd"  # sgd (Nesterov) | adamw | muon (filters; AdamW elsewhere)
    lr: float = 0.0  # peak LR; 0 = the optimizer's default: sgd 0.375 x sqrt(batch/256), adamw 1e-3, muon 0.02
    momentum: float = 0.85  # SGD Nesterov momentum
    norm_lr_scale: float = -1.0  # LR x this for BatchNorm shifts; -1 = 64 for zoo-net under SGD, else 1
    weight_decay: float = -1.0  # on weights only, never biases/norms; -1 = sgd 1.3e-3, adamw 0.05, muon 0.1
    batch_size: int = 256  # images per micro-batch
    schedule: Literal["cosine", "wsd", "linear", "constant"] = "linear"  # LR shape over budget progress
    warmup: float = 0.23  # fraction of the budget spent warming up
    warmup_start: float = 0.2  # LR multiplier the warmup starts from (0.2 + linear decay = a one-cycle)
    lr_final: float = 0.07  # LR multiplier at the end of the budget
    label_smoothing: float = 0.2  # cross-entropy label smoothing
    crop_pad: int = -1  # random translation by up to this many pixels (reflect padding); 0 = off, -1 = size/8
    flip: Literal["auto", "on", "off"] = "auto"  # horizontal flips + flip TTA; auto = on, except digits
    randaugment: int = 0  # RandAugment ops per image (0 = off); slow on CPU for large images
    mixup: float = 0.0  # MixUp alpha (0 = off)
    cutmix: float = 0.0  # CutMix alpha (0 = off)
    tta: int = 2  # test-time views: 0 none, 1 + mirror image (when flipping), 2 + 1-pixel shifts
    channels_last: bool = True  # NHWC memory format for convolutions
    head_fraction: float = 0.0  # finetune stage 1: fraction of the budget training only the new head
    finetune_lr_ratio: float = 0.1  # finetune stage 2: backbone LR as a fraction of lr
    unfreeze_top: int = 0  # finetune stage 2: train only the last N layer groups of the backbone (0 = all)
    layer_decay: float = 1.0  # layer-wise LR decay per layer group towards the input (1 = off; 0.65 typical)
    freeze_bn: bool = False  # keep pretrained BatchNorm statistics fixed while fine-tuning
    ema_decay: float = 0.0  # EMA of weights used for evaluation (0 = off)
    lookahead: float = 0.95  # every 5 steps pull the weights to their EMA, decay this^5 x progress^3 (0 = off)
    eval_every: float = 0.5  # fraction of the budget between evaluations (each costs test-set TTA passes)


# =============================================================================================
# Data: uint8 image tensors (N, C, H, W) in memory
# =============================================================================================

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm"}


@dataclass
class ImageSplits:
    train_x: torch.Tensor  # (N, C, H, W) uint8
    train_y: torch.Tensor  # (N,) int64
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: list[str]
    name: str


def load_digits_splits() -> ImageSplits:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.from_numpy(digits.images * (255.0 / 16.0)).round().to(torch.uint8).unsqueeze(1)  # (1797, 1, 8, 8)
    y = torch.from_numpy(digits.target).long()
    tr, te = train_test_split(range(len(y)), test_size=0.2, random_state=0, stratify=digits.target)
    return ImageSplits(x[tr], y[tr], x[te], y[te], [str(c) for c in digits.target_names], "digits")


def read_idx(path: Path) -> torch.Tensor:
    """An MNIST idx file (gzipped or not): magic, dims, then uint8 data."""
    import gzip
    import struct

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
        zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
        dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
        if zero != 0 or dtype != 0x08 or len(raw) != 4 + 4 * ndim + math.prod(dims):
            raise ValueError("not a uint8 idx file")
    except (OSError, ValueError, struct.error) as exc:
        raise ZooError(f"{path}: cannot read idx data ({exc})") from None
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).view(*dims)


def load_mnist_test_splits(root: Path, test_size: float | int = 0.2, name: str = "mnist-test") -> ImageSplits:
    """MNIST's 10,000 test images split once, stratified with seed 0 (a fraction or a count held out)."""
    from sklearn.model_selection import train_test_split

    x = read_idx(root / "t10k-images-idx3-ubyte.gz").unsqueeze(1)  # (10000, 1, 28, 28)
    y = read_idx(root / "t10k-labels-idx1-ubyte.gz").long()
    if len(x) != len(y):
        raise ZooError(f"{root}: {len(x)} images but {len(y)} labels")
    tr, te = train_test_split(range(len(y)), test_size=test_size, random_state=0, stratify=y.numpy())
    return ImageSplits(x[tr], y[tr], x[te], y[te], [str(i) for i in range(10)], name)


def _decode(path: Path, size: int | None):
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            if size and im.size != (size, size):
                im = im.resize((size, size), Image.BILINEAR)
            return torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(im.size[1], im.size[0], 3)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ZooError(f"{path}: cannot decode image ({exc})") from None


def load_class_folder(root: Path, size: int | None, classes: list[str] | None = None, log=print):
    """Images under ``root/<class>/``; returns (x uint8 NCHW, y, classes). Non-image files are counted.
    ``classes`` given: the held-out split of a training folder (one of its class folders may be empty)."""
    training = classes is None
    if not root.exists():
        raise ZooError(f"{root}: folder not found")
    if not root.is_dir():
        raise ZooError(f"{root}: not a folder (expected {root}/<class>/<image files>)")
    found = sorted(d.name for d in root.iterdir() if d.is_dir())
    classes = classes or found
    if not classes:
        raise ZooError(f"{root}: no class subfolders (expected {root}/<class>/<image files>)")
    images, labels, skipped, empty = [], [], 0, []
    for label, name in enumerate(classes):
        folder = root / name
        if not folder.is_dir():
            raise ZooError(f"{root}: class folder {name!r} is missing here but present in the training split")
        before = len(images)
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
                images.append(_decode(path, size))
                labels.append(label)
            elif path.is_file():
                skipped += 1
        if len(images) == before:
            empty.append(folder)
    if not images:
        raise ZooError(f"{root}: no images found in {len(classes)} class folders")
    if empty and training:  # a class the model could never learn: almost always a copy that went wrong
        raise ZooError(f"{empty[0]}: class folder holds no images ({len(empty)} of {len(classes)} class folders "
                       "are empty); add images or remove the folder")
    shapes = {tuple(im.shape) for im in images}
    if len(shapes) > 1:
        raise ZooError(f"{root}: images have different sizes {sorted(shapes)[:3]}...; set image_size=N to resize")
    if skipped:
        log(f"{root}: skipped {skipped} non-image files")
    x = torch.stack(images).permute(0, 3, 1, 2).contiguous()
    return x, torch.tensor(labels), classes


def load_folder_splits(root: Path, size: int | None, val_fraction: float, log=print) -> ImageSplits:
    """``root/train`` + ``root/val`` (or ``test``), else one folder split by a fixed seed."""
    held_out = next((root / d for d in ("val", "test") if (root / d).is_dir()), None)
    if (root / "train").is_dir() and held_out is not None:
        tx, ty, classes = load_class_folder(root / "train", size, log=log)
        vx, vy, _ = load_class_folder(held_out, size, classes, log=log)
        log(f"{root}: {len(ty)} train / {len(vy)} {held_out.name} images, {len(classes)} classes")
        return ImageSplits(tx, ty, vx, vy, classes, root.name)
    x, y, classes = load_class_folder(root, size, log=log)
    g = torch.Generator().manual_seed(0)  # fixed split: every run on this folder sees the same test set
    order = torch.randperm(len(y), generator=g)
    n_test = max(1, int(round(val_fraction * len(y))))
    if n_test >= len(y):
        raise ZooError(f"{root}: {len(y)} images are too few to hold out {val_fraction:.0%} for testing")
    te, tr = order[:n_test], order[n_test:]
    log(f"{root}: {len(tr)} train / {len(te)} test images (seeded {val_fraction:.0%} split), {len(classes)} classes")
    return ImageSplits(x[tr], y[tr], x[te], y[te], classes, root.name)


def load_torchvision_cifar10(root: Path) -> ImageSplits:
    from torchvision.datasets import CIFAR10

    try:
        sets = [CIFAR10(str(root), train=t, download=True) for t in (True, False)]
    except (OSError, RuntimeError) as exc:
        raise ZooError(f"cifar10: torchvision could not download to {root} ({exc}); offline, use "
                       "data=cifar10-subset or place cifar-10-batches-py there") from None
    xs = [torch.from_numpy(s.data).permute(0, 3, 1, 2).contiguous() for s in sets]
    ys = [torch.tensor(s.targets) for s in sets]
    return ImageSplits(xs[0], ys[0], xs[1], ys[1], list(sets[0].classes), "cifar10")


def resize_splits(splits: ImageSplits, size: int) -> None:
    """Resize both splits' uint8 images to size x size (antialiased bilinear)."""
    splits.train_x, splits.test_x = (F.interpolate(t.float(), size=(size, size), mode="bilinear", antialias=True)
                                     .round().clamp(0, 255).byte() for t in (splits.train_x, splits.test_x))


def load_data(cfg: VisionConfig, run) -> ImageSplits:
    size = cfg.image_size or None
    if cfg.data == "digits":
        splits = load_digits_splits()
    elif cfg.data == "cifar10-subset":
        splits = load_folder_splits(run.data_path("cifar10-subset"), size, cfg.val_fraction, run.log)
    elif cfg.data == "mnist-test":
        splits = load_mnist_test_splits(run.data_path("mnist-test"))
    elif cfg.data == "cifar10":
        splits = load_torchvision_cifar10(run.data_path("cifar10"))
    elif Path(cfg.data).exists():
        splits = load_folder_splits(Path(cfg.data), size or 32, cfg.val_fraction, run.log)
    else:
        raise ZooError(f"data={cfg.data!r}: not a vision dataset (digits, mnist-test, cifar10-subset, cifar10) nor an "
                       "existing folder")
    if size and splits.train_x.shape[-1] != size:
        resize_splits(splits, size)
    return splits


def resolve_auto(cfg: VisionConfig, data: ImageSplits) -> VisionConfig:
    """Augmentations that depend on the data: no flips for handwritten digits (a flipped digit is
    another symbol), translation by an eighth of the image side (4 px at 32 px)."""
    flip = cfg.flip if cfg.flip != "auto" else ("off" if data.name in ("digits", "mnist-test") else "on")
    pad = cfg.crop_pad if cfg.crop_pad >= 0 else max(1, data.train_x.shape[-1] // 8)
    return dataclasses.replace(cfg, flip=flip, crop_pad=pad)


# =============================================================================================
# Augmentation, on whole uint8 batches
# =============================================================================================

def random_translate(x: torch.Tensor, pad: int, g: torch.Generator) -> torch.Tensor:
    """Shift each image by up to ``pad`` pixels, filling by reflection (random crop of the padded image)."""
    n, _, h, w = x.shape
    padded = F.pad(x.float(), (pad, pad, pad, pad), mode="reflect").to(x.dtype)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=g, device=g.device).tolist()
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=g, device=g.device).tolist()
    return torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])


def random_flip(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    mask = torch.rand(x.shape[0], generator=g, device=g.device) < 0.5
    return torch.where(mask.view(-1, 1, 1, 1).to(x.device), x.flip(-1), x)


def randaugment(x: torch.Tensor, ops: int, g: torch.Generator) -> torch.Tensor:
    from torchvision.transforms import v2

    aug = v2.RandAugment(num_ops=ops)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g, device=g.device))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # torchvision draws from the global RNG: pin it to this batch's seed
        return torch.stack([aug(img) for img in x])


def augment(batch, g: torch.Generator, cfg: VisionConfig):
    x, y = batch
    if cfg.crop_pad:
        x = random_translate(x, cfg.crop_pad, g)
    if cfg.flip == "on":
        x = random_flip(x, g)
    if cfg.randaugment:
        x = randaugment(x, cfg.randaugment, g)
    return x, y


def mix(x: torch.Tensor, y: torch.Tensor, num_classes: int, cfg: VisionConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """MixUp or CutMix (chosen at random when both are on); returns soft targets."""
    from torchvision.transforms import v2

    choices = [t for t, a in ((v2.MixUp, cfg.mixup), (v2.CutMix, cfg.cutmix)) if a > 0]
    alphas = [a for a in (cfg.mixup, cfg.cutmix) if a > 0]
    k = int(torch.randint(len(choices), (1,)))
    return choices[k](alpha=alphas[k], num_classes=num_classes)(x, y)


# =============================================================================================
# Network
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
        """Stem filters = eigenvectors of the 2x2 patch covariance / sqrt(eigenvalue), in +/- pairs."""
        c, k = x.shape[1], self.whiten.kernel_size[0]
        patches = x.float().unfold(2, k, 1).unfold(3, k, 1).permute(0, 2, 3, 1, 4, 5).reshape(-1, c * k * k)
        evals, evecs = torch.linalg.eigh(patches.T @ patches / len(patches))
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


def build_model(cfg: VisionConfig, in_channels: int, num_classes: int, image_size: int) -> tuple[nn.Module, str]:
    """Returns the model and the name of its classifier module."""
    if cfg.model in OWN_MODELS:
        model = OWN_MODELS[cfg.model](in_channels, num_classes, cfg.width, image_size)
        if cfg.weights:
            _load_own_weights(model, cfg.weights, cfg.model)
        return model, "head"
    import timm

    if cfg.model not in timm.list_models():
        import difflib

        near = difflib.get_close_matches(cfg.model, timm.list_models(), n=1)
        raise ZooError(f"model={cfg.model!r}: not a timm model" + (f"; did you mean {near[0]!r}?" if near else ""))
    kwargs = dict(num_classes=num_classes, in_chans=in_channels)
    if cfg.weights == "hub":
        try:
            model = timm.create_model(cfg.model, pretrained=True, **kwargs)
        except Exception as exc:  # offline, or no pretrained tag: say what to do instead
            raise ZooError(f"weights=hub: cannot get pretrained {cfg.model} from the timm hub ({type(exc).__name__}); "
                           "download them elsewhere and pass weights=PATH") from None
    elif cfg.weights:
        path = Path(cfg.weights)
        if not path.exists():
            raise ZooError(f"weights={cfg.weights}: file or folder not found")
        file = path / "model.safetensors" if path.is_dir() else path
        import pickle

        from safetensors import SafetensorError

        try:
            model = timm.create_model(cfg.model, pretrained=True, pretrained_cfg_overlay={"file": str(file)},
                                      **kwargs)
        except (RuntimeError, OSError, KeyError, ValueError, EOFError, pickle.UnpicklingError, SafetensorError) as exc:
            raise ZooError(f"weights={file}: cannot read weights into {cfg.model} "
                           f"({str(exc).splitlines()[0][:160]})") from None
    else:
        model = timm.create_model(cfg.model, **kwargs)
    if image_size <= 64 and hasattr(model, "conv1") and hasattr(model, "maxpool"):
        # ResNet family on small images: a 3x3 stride-1 stem and no max-pool keep spatial detail.
        # the stem's output width is what bn1 normalises (a deep stem's first conv can be narrower)
        out = model.bn1.num_features if isinstance(getattr(model, "bn1", None), nn.BatchNorm2d) else (
            model.conv1.out_channels if isinstance(model.conv1, nn.Conv2d) else model.conv1[-1].out_channels)
        if not cfg.weights:
            model.conv1 = nn.Conv2d(in_channels, out, 3, padding=1, bias=False)
        model.maxpool = nn.Identity()
    return model, model.pretrained_cfg.get("classifier", "fc")


def _read_state(file: Path) -> dict:
    """A state dict from a .safetensors file or a torch checkpoint (its ``model`` entry), tensors only."""
    import pickle

    from safetensors import SafetensorError

    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(file))
        blob = torch.load(file, map_location="cpu", weights_only=True)
    except (SafetensorError, pickle.UnpicklingError, RuntimeError, OSError, EOFError, ValueError) as exc:
        why = ("not a torch checkpoint of plain tensors" if isinstance(exc, pickle.UnpicklingError)
               else (str(exc).splitlines() or [type(exc).__name__])[0][:160])
        raise ZooError(f"weights={file}: cannot read weights ({why})") from None
    state = blob.get("model", blob) if isinstance(blob, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ZooError(f"weights={file}: cannot read weights (not a state dict of tensors)")
    return state


def _load_own_weights(model: nn.Module, path: str, name: str) -> None:
    """Weights from a previous zoo run (model.safetensors or checkpoint.pt); the head is re-initialised."""
    file = Path(path)
    file = file / "model.safetensors" if file.is_dir() else file
    if not file.is_file():
        raise ZooError(f"weights={path}: file not found")
    state = _read_state(file)
    state = {k: v for k, v in state.items() if not k.startswith("head.")}
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatch: another width or channel count
        raise ZooError(f"weights={file}: does not fit {name} ({str(exc).splitlines()[-1].strip()})") from None
    if unexpected or [k for k in missing if not k.startswith("head.")]:
        raise ZooError(f"weights={file}: does not fit {name} (unexpected {unexpected[:3]}, missing {missing[:3]})")


def input_stats(cfg: VisionConfig, model: nn.Module, train_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pretrained models use their own normalisation; from-scratch models the training set's."""
    if cfg.weights and cfg.model not in OWN_MODELS:
        pc = model.pretrained_cfg
        return torch.tensor(pc["mean"]), torch.tensor(pc["std"])
    x = train_x.float() / 255
    return x.mean(dim=(0, 2, 3)), x.std(dim=(0, 2, 3)).clamp(min=1e-3)


# =============================================================================================
# Optimizer and schedule
# =============================================================================================

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


# SGD values were tuned for zoo-net on cifar10-subset at batch 256 (airbench94's, in mean-loss units);
# timm ResNets usually want lr 0.1 and weight_decay 5e-4.
DEFAULT_LR = {"sgd": 0.375, "adamw": 1e-3, "muon": 0.02}
DEFAULT_WD = {"sgd": 1.3e-3, "adamw": 0.05, "muon": 0.1}  # coupled (SGD) vs decoupled (AdamW, Muon) decay


def build_optimizer(cfg: VisionConfig, model: nn.Module, head: str) -> torch.optim.Optimizer:
    lr = cfg.lr or DEFAULT_LR[cfg.optimizer]
    if cfg.optimizer == "sgd" and not cfg.lr:
        lr *= optim.batch_lr_scale(cfg.batch_size * cfg.accum_steps, 256)
    wd = cfg.weight_decay if cfg.weight_decay >= 0 else DEFAULT_WD[cfg.optimizer]
    finetuning = bool(cfg.weights)
    depth = layer_groups(model, head) if finetuning and cfg.layer_decay != 1.0 else {}
    top = max(depth.values(), default=0)
    auto_scale = 64.0 if cfg.model == "zoo-net" and cfg.optimizer == "sgd" else 1.0  # airbench's SGD setting
    norm_scale = cfg.norm_lr_scale if cfg.norm_lr_scale > 0 else auto_scale
    norm_shifts = {id(m.bias) for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
    groups: dict[tuple, list] = {}
    for name, p in model.named_parameters():
        is_head = name.startswith(head + ".")
        scale = 1.0 if is_head or not finetuning else cfg.finetune_lr_ratio
        scale *= cfg.layer_decay ** (top - depth[name]) if depth and not is_head else 1.0
        scale *= norm_scale if id(p) in norm_shifts else 1.0
        kind = "muon" if cfg.optimizer == "muon" and p.ndim >= 2 and not is_head else "adamw"
        decay = 0.0 if optim.no_decay(name, p) else (wd if kind == "muon" or cfg.optimizer != "muon" else 0.0)
        groups.setdefault((scale, decay, kind, is_head), []).append(p)
    param_groups = []
    for (scale, decay, kind, is_head), params in groups.items():
        base = DEFAULT_LR["adamw"] if cfg.optimizer == "muon" and kind == "adamw" else lr
        group = {"params": params, "lr": base * scale, "weight_decay": decay, "is_head": is_head}
        if cfg.optimizer == "muon":
            group["optimizer"] = kind
        param_groups.append(group)
    optim.assert_covers(model, [g["params"] for g in param_groups])
    if cfg.optimizer == "sgd":
        return optim.sgd_nesterov(param_groups, lr, cfg.momentum)
    if cfg.optimizer == "adamw":
        return optim.adamw(param_groups, lr)
    return optim.MuonAdamW(param_groups)


def stage_hook(cfg: VisionConfig, model: nn.Module, head: str):
    """Fine-tuning stages as a function of progress: head only, then the (top of the) backbone.

    Parameters the architecture keeps frozen (a fixed whitening stem, unit norm scales) stay frozen.
    """
    depth = layer_groups(model, head) if cfg.unfreeze_top else {}
    top = max(depth.values(), default=0)
    trainable = {n: p.requires_grad for n, p in model.named_parameters()}
    learnable = dict(trainable)

    def on_step(progress: float, step: int) -> None:
        stage2 = progress >= cfg.head_fraction
        for name, p in model.named_parameters():
            if name.startswith(head + "."):
                want = True
            elif not stage2:
                want = False
            else:
                want = not depth or depth[name] > top - 1 - cfg.unfreeze_top
            want = want and learnable[name]
            if trainable[name] != want:
                p.requires_grad_(want)
                trainable[name] = want
        if cfg.freeze_bn:
            for m in model.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()

    return on_step


# =============================================================================================
# Evaluation
# =============================================================================================

def _mirror(model: nn.Module, x: torch.Tensor, flip: bool) -> torch.Tensor:
    return 0.5 * (model(x).float() + model(x.flip(-1)).float()) if flip else model(x).float()


def predict(model: nn.Module, x_uint8: torch.Tensor, normalize, tta: int, flip: bool, batch: int = 1024):
    """Logits averaged over test-time views: 1 adds the mirror image (when training flips), 2 also
    the image shifted by one pixel both ways (half the weight on the centred views)."""
    logits = []
    for i in range(0, len(x_uint8), batch):
        x = normalize(x_uint8[i:i + batch])
        out = _mirror(model, x, flip and tta >= 1)
        if tta >= 2:
            h, w = x.shape[-2:]
            layout = torch.channels_last if x.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format
            padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
            shifted = (padded[..., :h, :w].contiguous(memory_format=layout),
                       padded[..., 2:, 2:].contiguous(memory_format=layout))
            out = 0.5 * out + 0.25 * sum(_mirror(model, v, flip) for v in shifted)
        logits.append(out)
    return torch.cat(logits)


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, normalize, tta: int, flip: bool,
             num_classes: int) -> dict:
    logits = predict(model, x, normalize, tta, flip)
    y = y.to(logits.device)
    return {"accuracy": metrics.accuracy(logits, y), "macro_f1": metrics.macro_f1(logits, y, num_classes),
            "test_loss": F.cross_entropy(logits, y).item()}


# =============================================================================================
# Training
# =============================================================================================

@recipe("vision/resnet", config=VisionConfig, benchmark="cifar10-subset", metric="accuracy", budget="60s",
        summary="image classification from scratch: compact ResNet (or any timm model), SGD-Nesterov, TTA")
@recipe("vision/finetune", config=VisionConfig, benchmark="cifar10-subset", metric="accuracy", budget="60s",
        summary="two-stage transfer: train the new head on a frozen backbone, then unfreeze at 10x lower LR",
        defaults={"model": "resnet18", "optimizer": "adamw", "head_fraction": 0.2})
def train(cfg: VisionConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device)
    if cfg.head_fraction > 0 and not cfg.weights:
        raise ZooError("two-stage fine-tuning (head_fraction > 0) needs pretrained weights: weights=PATH "
                       "(file or folder) or weights=hub")
    data = load_data(cfg, run)
    cfg = resolve_auto(cfg, data)
    pretrained_timm = bool(cfg.weights) and cfg.model not in OWN_MODELS
    if pretrained_timm and data.train_x.shape[1] == 1:  # grey images into an RGB-pretrained stem
        data.train_x, data.test_x = data.train_x.expand(-1, 3, -1, -1), data.test_x.expand(-1, 3, -1, -1)
    num_classes, in_channels = len(data.classes), data.train_x.shape[1]
    model, head = build_model(cfg, in_channels, num_classes, data.train_x.shape[-1])
    if pretrained_timm and not cfg.image_size:
        size = model.pretrained_cfg["input_size"][-1]  # the pretrained model's resolution
        resize_splits(data, size)
    run.inspect(train=(data.train_x, data.train_y), val=(data.test_x, data.test_y), task="classification",
                num_classes=num_classes, fine_tune=(head + ".",) if cfg.weights else False)
    mean, std = (t.view(1, -1, 1, 1).to(device) for t in input_stats(cfg, model, data.train_x))
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=memory_format)
    run.log(f"{data.name}: {len(data.train_y)} train / {len(data.test_y)} test, {num_classes} classes, "
            f"{tuple(data.train_x.shape[1:])}; {cfg.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params")

    def normalize(x_uint8: torch.Tensor) -> torch.Tensor:
        x = x_uint8.to(device, non_blocking=True).float().div_(255)
        return ((x - mean) / std).contiguous(memory_format=memory_format)

    if hasattr(model, "init_whitening") and not cfg.weights:
        model.init_whitening(normalize(data.train_x[:5000]))

    def loss_fn(model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        x, y = normalize(x), y.to(device, non_blocking=True)
        if cfg.mixup or cfg.cutmix:
            x, y = mix(x, y, num_classes, cfg)
        return F.cross_entropy(model(x), y, label_smoothing=cfg.label_smoothing)

    from recipe_zoo.core.batches import TensorBatches

    batches = TensorBatches((data.train_x, data.train_y), cfg.batch_size, seed=run.seed,
                            transform=functools.partial(augment, cfg=cfg))
    optimizer = build_optimizer(cfg, model, head)
    lr_schedule = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup, final=cfg.lr_final, start=cfg.warmup_start)
    update = functools.partial(schedule.apply_schedules, lr=lr_schedule,
                               momentum=schedule.muon_momentum if cfg.optimizer == "muon" else None)
    hooks, initial = [], None
    if cfg.weights:
        hooks.append(stage_hook(cfg, model, head))
        initial = snapshot(model)
    elif isinstance(model, ZooNet):  # the whitening stem's bias settles early, then stays (airbench)
        hooks.append(lambda progress, step: model.whiten.bias.requires_grad_(progress < 0.3))
    on_step = (lambda progress, step: [hook(progress, step) for hook in hooks]) if hooks else None
    result = fit(model, optimizer, batches, loss_fn, run, device=device,
                 evaluate=lambda m: evaluate(m, data.test_x, data.test_y, normalize, cfg.tta, cfg.flip == "on",
                                             num_classes),
                 update_hparams=update, settings=LoopSettings.of(cfg), on_step=on_step)
    if initial is not None:
        _report_weight_change(model, initial, head, run)
    export_safetensors(result.eval_model, run.dir / "model.safetensors", metadata={"recipe": run.spec.name})
    return {**result.stats(), **result.metrics}


def _report_weight_change(model: nn.Module, initial: dict, head: str, run) -> None:
    change = relative_weight_change(model, initial)
    worst = sorted(change.items(), key=lambda kv: -kv[1])[:5]
    run.log("largest relative weight change: " + ", ".join(f"{n} {v:.1%}" for n, v in worst))
    over = [n for n, v in change.items() if v > 0.10 and not n.startswith(head + ".")]
    if over:
        run.log(f"warning: {len(over)} backbone tensors moved more than 10% (e.g. {over[0]}): the fine-tuning LR "
                "is probably too high for transfer; try finetune_lr_ratio=0.03 or layer_decay=0.65")
