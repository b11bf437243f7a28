"""Diffusion: DDPM (``diffusion/ddpm``) and flow matching (``diffusion/flow``), unconditional or
class-conditional with classifier-free guidance (``-cfg`` variants), scored by an honestly named FID.

Reads top to bottom: config, data, network (diffusers' UNet2DModel, sized for the budget), the two
objectives and their samplers, FID features, training. Images live in memory as uint8 tensors.

FID is the Frechet distance between Gaussian fits of features of generated and of held-out real
images (``recipe_zoo.core.metrics.frechet_distance``). With Inception-v3 weights (``inception_weights=PATH``,
torch-fidelity's file) it is the standard ``fid``. These machines cannot download them, so every run
also reports ``fid_zoo``: the same distance on the penultimate features of a small classifier trained
(on the CPU, fixed seed and epochs, cached) on the dataset's training split. ``fid_zoo`` is another
metric than Inception FID; the two are never ranked together.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import distributed, metrics, optim, schedule
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.flops import counting_flops, peak_flops
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import choose_device, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import recipe

# =============================================================================================
# Config
# =============================================================================================


@dataclass
class DiffusionConfig(LoopSettings):
    data: str = "digits"  # digits, mnist, cifar10-subset, or a folder of class subfolders (or of images)
    image_size: int = 0  # pixels per side; 0 = the dataset's own (own folders: 32)
    val_fraction: float = 0.1  # held-out fraction when a folder has no val/ or test/ inside
    method: Literal["ddpm", "flow"] = "ddpm"  # denoising diffusion, or conditional flow matching
    prediction: Literal["v", "epsilon"] = "v"  # ddpm network target: v = a*eps - s*x0 (fine at low SNR), or the noise
    noise_schedule: Literal["cosine", "linear"] = "cosine"  # ddpm betas: cosine (Nichol & Dhariwal) or linear
    timesteps: int = 1000  # ddpm training timesteps
    flow_time: Literal["uniform", "logit_normal"] = "uniform"  # flow: how training times t are drawn
    conditional: bool = False  # class-conditional with classifier-free guidance
    cond_drop: float = 0.1  # fraction of training labels replaced by the null class
    guidance: float = 1.5  # CFG scale at sampling: uncond + g * (cond - uncond); 1 = the conditional model alone
    width: int = 0  # channels of the first U-Net level (x2, x4 below); 0 = the widest that the budget trains
    levels: int = 3  # U-Net resolutions (the image side must divide by 2^(levels-1))
    layers_per_block: int = 1  # ResNet blocks per level on the way down (one more on the way up)
    attention: bool = True  # self-attention at the lowest resolution
    min_steps: int = 500  # width=0 under a time budget: the widest net predicted to get this many steps
    lr: float = 1e-3  # AdamW LR: 1e-3 for budgets of minutes (2 min on mnist: fid_zoo 8.2 vs 37 at 1e-4)
    weight_decay: float = 0.01  # decoupled, on weights only (never biases, norms, embeddings)
    batch_size: int = 64
    schedule: Literal["constant", "cosine", "wsd", "linear"] = "constant"  # LR shape; EMA does the averaging
    warmup: float = 0.0  # fraction of the budget warming up (none: clipping and the EMA keep the start stable)
    flip: Literal["auto", "on", "off"] = "auto"  # horizontal flips in training; auto = on, except digits
    sampler: Literal["auto", "ddim", "euler", "heun"] = "auto"  # auto: ddim for ddpm, heun for flow
    sample_steps: int = 0  # sampler steps; 0 = ddim 50, euler 50, heun 25 (49 network evaluations)
    eta: float = 0.0  # DDIM stochasticity (0 = deterministic)
    n_samples: int = 1000  # generated images the FID uses (fixed per benchmark so runs compare)
    n_real: int = 1000  # held-out real images the FID uses (at most the held-out split)
    sample_batch: int = 500  # images per sampling forward pass
    grid: int = 64  # images in samples.png
    inception_weights: str = ""  # torch-fidelity's pt_inception-2015-12-05 file: adds the standard `fid`
    ema_decay: float = 0.999  # EMA weights are used for sampling and evaluation (decay warmed up)
    clip_grad: float = 1.0
    eval_every: float = 0.0  # fraction of the budget between FID evaluations (0 = only at the end)

    def benchmark_key(self, key: str) -> str:
        return f"{key}:cond" if self.conditional else key


# =============================================================================================
# Data: uint8 image tensors (N, C, H, W) in memory
# =============================================================================================

def load_mnist_generative(root: Path):
    """MNIST's 10,000 test images split once into 9,000 training and 1,000 held-out (stratified, seed 0)."""
    from recipe_zoo.recipes.vision import load_mnist_test_splits

    return load_mnist_test_splits(root, test_size=1000, name="mnist")


def load_data(cfg: DiffusionConfig, run):
    from recipe_zoo.recipes.vision import load_digits_splits, load_folder_splits, resize_splits

    size = cfg.image_size or None
    if cfg.data == "digits":
        data = load_digits_splits()
    elif cfg.data == "mnist":
        data = load_mnist_generative(run.data_path("mnist"))
    elif cfg.data == "cifar10-subset":
        data = load_folder_splits(run.data_path("cifar10-subset"), size, cfg.val_fraction, run.log)
    elif Path(cfg.data).exists():
        data = load_folder_splits(Path(cfg.data), size or 32, cfg.val_fraction, run.log)
    else:
        raise ZooError(f"data={cfg.data!r}: not a diffusion dataset (digits, mnist, cifar10-subset) nor an "
                       "existing folder")
    if size and data.train_x.shape[-1] != size:
        resize_splits(data, size)
    if len(data.test_y) < 2:
        raise ZooError(f"data={cfg.data}: {len(data.test_y)} held-out image(s); the FID needs at least 2")
    return data


def to_model_range(x_uint8: torch.Tensor) -> torch.Tensor:
    return x_uint8.float() / 127.5 - 1.0


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    return ((x.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


# =============================================================================================
# Network: diffusers' UNet2DModel, sized for the budget
# =============================================================================================

def build_unet(cfg: DiffusionConfig, width: int, channels: int, size: int, num_classes: int) -> nn.Module:
    from diffusers import UNet2DModel

    if size % 2 ** (cfg.levels - 1):
        raise ZooError(f"levels={cfg.levels}: the image side {size} must divide by {2 ** (cfg.levels - 1)}; "
                       "lower levels or set image_size")
    if width % 8:
        raise ZooError(f"width={width}: must be a multiple of 8 (GroupNorm with 8 groups)")
    down, up = ["DownBlock2D"] * cfg.levels, ["UpBlock2D"] * cfg.levels
    if cfg.attention:
        down[-1], up[0] = "AttnDownBlock2D", "AttnUpBlock2D"
    return UNet2DModel(
        sample_size=size, in_channels=channels, out_channels=channels,
        block_out_channels=tuple(width * min(2 ** i, 4) for i in range(cfg.levels)),
        layers_per_block=cfg.layers_per_block, down_block_types=tuple(down), up_block_types=tuple(up),
        norm_num_groups=8, attention_head_dim=8,
        num_class_embeds=num_classes + 1 if cfg.conditional else None)  # the last class is "no label"


WIDTHS = (128, 96, 64, 48, 32, 24, 16, 8)


def choose_width(cfg: DiffusionConfig, budget, channels: int, size: int, num_classes: int, device, log) -> int:
    """The widest U-Net that trains ``min_steps`` steps in a time budget, predicted from its counted
    FLOPs per step at 40% of the device's measured (cached) peak on a CPU, 30% on a GPU: the same
    answer on every run of a machine, where timing a few steps would flip between widths near the
    threshold. Step and epoch budgets: width 32.

    On mnist at 5 min, width 16 (~900 steps) reached fid_zoo 11.3 where width 8 (~2,000 steps)
    reached 21.5-23.4: the wider net with fewer steps wins, so ``min_steps`` is a floor, not a goal."""
    if cfg.width:
        return cfg.width
    if budget.kind != "seconds":
        return 32
    peak = peak_flops(device)
    if peak is None:  # an accelerator missing from the peak table
        log(f"no peak FLOP/s known for {device}: width 32 (set width= to size the net yourself)")
        return 32
    rate = peak * (0.4 if device.type == "cpu" else 0.3)
    x, t = torch.zeros(2, channels, size, size), torch.zeros(2, dtype=torch.long)
    labels = torch.zeros(2, dtype=torch.long) if cfg.conditional else None
    for width in WIDTHS:
        model = build_unet(cfg, width, channels, size, num_classes)
        with counting_flops() as counter:  # on 2 images, scaled to the batch
            model(x, t, class_labels=labels).sample.sum().backward()
        step_flops = counter.get_total_flops() / 2 * cfg.batch_size * cfg.accum_steps
        steps = budget.amount * rate / step_flops
        if steps >= cfg.min_steps or width == WIDTHS[-1]:
            log(f"width {width}: {step_flops / 1e9:.1f} GFLOP per step, ~{steps:.0f} steps predicted in "
                f"{budget.amount:.0f}s at {rate / 1e9:.0f} GFLOP/s (the widest with min_steps={cfg.min_steps})")
            return width
    raise AssertionError("unreachable")


def build_optimizer(cfg: DiffusionConfig, model: nn.Module) -> torch.optim.Optimizer:
    groups = optim.decay_groups(model, cfg.weight_decay)  # no decay on biases, norms, class embeddings
    optim.assert_covers(model, [g["params"] for g in groups])
    return optim.adamw(groups, cfg.lr, betas=(0.9, 0.999))


# =============================================================================================
# Objectives and samplers
# =============================================================================================

def noise_scheduler(cfg: DiffusionConfig):
    from diffusers import DDPMScheduler

    return DDPMScheduler(num_train_timesteps=cfg.timesteps,
                         beta_schedule="squaredcos_cap_v2" if cfg.noise_schedule == "cosine" else "linear",
                         prediction_type="epsilon" if cfg.prediction == "epsilon" else "v_prediction")


def drop_labels(labels: torch.Tensor, null: int, p: float, g: torch.Generator | None = None) -> torch.Tensor:
    """Classifier-free guidance training: a fraction ``p`` of the labels become the null class."""
    drop = torch.rand(labels.shape, generator=g, device=labels.device) < p
    return torch.where(drop, torch.full_like(labels, null), labels)


def diffusion_loss(model, x0: torch.Tensor, labels, cfg: DiffusionConfig, scheduler) -> torch.Tensor:
    """MSE on the noise (epsilon) or on v at a uniformly drawn timestep."""
    noise = torch.randn_like(x0)
    t = torch.randint(0, cfg.timesteps, (len(x0),), device=x0.device)
    x_t = scheduler.add_noise(x0, noise, t)
    target = noise if cfg.prediction == "epsilon" else scheduler.get_velocity(x0, noise, t)
    return F.mse_loss(model(x_t, t, class_labels=labels).sample.float(), target.float())


def flow_loss(model, x0: torch.Tensor, labels, cfg: DiffusionConfig) -> torch.Tensor:
    """Conditional flow matching on the straight line x_t = (1 - t) x0 + t noise: target velocity noise - x0."""
    noise = torch.randn_like(x0)
    if cfg.flow_time == "uniform":
        t = torch.rand(len(x0), device=x0.device)
    else:  # SD3's logit-normal: more training on the middle of the path
        t = torch.sigmoid(torch.randn(len(x0), device=x0.device))
    tb = t.view(-1, 1, 1, 1)
    x_t = (1 - tb) * x0 + tb * noise
    pred = model(x_t, t * 1000, class_labels=labels).sample
    return F.mse_loss(pred.float(), (noise - x0).float())


def guided(model, x: torch.Tensor, t, labels, null: int, guidance: float) -> torch.Tensor:
    """The network's output; with labels, uncond + guidance x (cond - uncond) in one batched pass."""
    if labels is None:
        return model(x, t, class_labels=None).sample
    if guidance == 1.0:
        return model(x, t, class_labels=labels).sample
    t2 = torch.cat([t, t]) if torch.is_tensor(t) and t.ndim else t
    both = model(torch.cat([x, x]), t2, class_labels=torch.cat([labels, torch.full_like(labels, null)])).sample
    cond, uncond = both.chunk(2)
    return uncond + guidance * (cond - uncond)


def resolve_sampler(cfg: DiffusionConfig) -> tuple[str, int]:
    sampler = cfg.sampler if cfg.sampler != "auto" else ("ddim" if cfg.method == "ddpm" else "heun")
    if (sampler == "ddim") != (cfg.method == "ddpm"):
        raise ZooError(f"sampler={sampler}: method={cfg.method} samples with "
                       f"{'ddim' if cfg.method == 'ddpm' else 'euler or heun'}")
    steps = cfg.sample_steps or (25 if sampler == "heun" else 50)
    if steps < 1:
        raise ZooError(f"sample_steps={cfg.sample_steps}: must be at least 1")
    return sampler, steps


def network_evaluations(sampler: str, steps: int) -> int:
    return 2 * steps - 1 if sampler == "heun" else steps


@torch.no_grad()
def sample(model, cfg: DiffusionConfig, n: int, shape: tuple, labels: torch.Tensor | None, null: int,
           device, seed: int) -> torch.Tensor:
    """``n`` images in [-1, 1] from the EMA model, seeded (the noise is drawn on the CPU, so a seed
    gives the same starting noise on any device)."""
    sampler, steps = resolve_sampler(cfg)
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(0, n, cfg.sample_batch):
        m = min(cfg.sample_batch, n - i)
        x = torch.randn(m, *shape, generator=g).to(device)
        lab = labels[i:i + m].to(device) if labels is not None else None
        if sampler == "ddim":
            x = _ddim(model, x, lab, null, cfg, steps, g)
        else:
            x = _flow_ode(model, x, lab, null, cfg, steps, heun=sampler == "heun")
        out.append(x.float().clamp(-1, 1).cpu())
    return torch.cat(out)


def _ddim(model, x, labels, null, cfg, steps, g):
    from diffusers import DDIMScheduler

    ddim = DDIMScheduler.from_config(noise_scheduler(cfg).config, timestep_spacing="trailing")
    ddim.set_timesteps(steps)
    for t in ddim.timesteps:
        out = guided(model, x, t.to(x.device).expand(len(x)), labels, null, cfg.guidance)
        x = ddim.step(out.float(), t, x, eta=cfg.eta, generator=g if x.device.type == "cpu" else None).prev_sample
    return x


def _flow_ode(model, x, labels, null, cfg, steps, heun: bool):
    """Integrate dx/dt = v from t = 1 (noise) to t = 0 (data) with Euler or Heun steps."""
    ts = torch.linspace(1.0, 0.0, steps + 1, device=x.device)

    def velocity(x, t):
        return guided(model, x, (t * 1000).expand(len(x)), labels, null, cfg.guidance).float()

    for t, t_next in zip(ts[:-1], ts[1:]):
        v = velocity(x, t)
        x_euler = x + (t_next - t) * v
        if heun and t_next > 0:  # the last step stays Euler (the velocity at t = 0 is not needed)
            x = x + (t_next - t) * 0.5 * (v + velocity(x_euler, t_next))
        else:
            x = x_euler
    return x


# =============================================================================================
# FID features: a small classifier trained on the training split (fid_zoo), or Inception-v3 (fid)
# =============================================================================================

class FeatureNet(nn.Module):
    """conv-conv-pool x2, conv, global average pool: 128 features (the FID's), then a linear classifier."""

    VERSION = 1  # part of the cache key: change it when the net or its training changes

    def __init__(self, channels: int, num_classes: int):
        super().__init__()

        def block(c_in, c_out):
            return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]

        self.features = nn.Sequential(*block(channels, 32), *block(32, 32), nn.MaxPool2d(2),
                                      *block(32, 64), *block(64, 64), nn.MaxPool2d(2),
                                      *block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(128, num_classes)

    def forward(self, x):
        return self.head(self.features(x))

    @torch.no_grad()
    def embed(self, images: torch.Tensor, batch: int = 500) -> np.ndarray:
        """(n, 128) float64 features of images in [-1, 1]."""
        self.eval()
        return torch.cat([self.features(images[i:i + batch].float()) for i in range(0, len(images), batch)]
                         ).double().numpy()


def fid_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo" / "features" / "fid_zoo"


def feature_net(data, log, epochs: int = 8) -> tuple[FeatureNet, float]:
    """The fid_zoo feature network for this training split: trained on the CPU with a fixed seed and
    number of epochs (the same network on every machine), cached by the split's content hash.
    Returns it and its held-out accuracy."""
    from safetensors.torch import load_file, save_file

    digest = hashlib.sha256()
    for t in (data.train_x, data.train_y, data.test_x, data.test_y):
        digest.update(t.contiguous().numpy().tobytes())
    key = f"{data.name}-v{FeatureNet.VERSION}-{digest.hexdigest()[:16]}"
    path = fid_cache_dir() / f"{key}.safetensors"
    num_classes = int(max(data.train_y.max(), data.test_y.max())) + 1
    if num_classes < 2:
        raise ZooError(f"data={data.name}: fid_zoo trains its feature classifier on class labels, and this data has "
                       "one class; put the images in class subfolders, or pass inception_weights=PATH")
    net = FeatureNet(data.train_x.shape[1], num_classes)
    if path.is_file():
        try:
            net.load_state_dict(load_file(str(path)))
            net.eval()
            acc = metrics.accuracy(net(to_model_range(data.test_x)), data.test_y)
            log(f"fid_zoo features: cached classifier {path} (held-out accuracy {acc:.4f})")
            return net, acc
        except (RuntimeError, OSError) as exc:  # unreadable or another shape: train again
            log(f"fid_zoo feature cache {path} unusable ({str(exc).splitlines()[0]}): retraining")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-4)
        x, y = to_model_range(data.train_x), data.train_y
        steps_per_epoch = math.ceil(len(y) / 128)
        lr_at = torch.optim.lr_scheduler.OneCycleLR(opt, 2e-3, total_steps=epochs * steps_per_epoch)
        net.train()
        for _ in range(epochs):
            order = torch.randperm(len(y))
            for i in range(0, len(y), 128):
                idx = order[i:i + 128]
                F.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                lr_at.step()
    net.eval()
    with torch.no_grad():
        acc = metrics.accuracy(net(to_model_range(data.test_x)), data.test_y)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the ranks of a torchrun job may write at once
    save_file(net.state_dict(), str(tmp))
    tmp.replace(path)
    log(f"fid_zoo features: trained a classifier on {len(y)} training images ({epochs} epochs, CPU, seed 0), "
        f"held-out accuracy {acc:.4f}; cached at {path}")
    return net, acc


class InceptionFeatures:
    """torch-fidelity's Inception-v3 (the standard FID network), from a local weights file."""

    def __init__(self, path: str, device):
        file = Path(path)
        if not file.is_file():
            raise ZooError(f"inception_weights={path}: file not found")
        try:  # refuse a pickle that carries code before torch-fidelity (weights_only=False) loads it
            state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise ZooError(f"inception_weights={file}: not a plain state dict ({type(exc).__name__})") from None
        if not isinstance(state, dict):
            raise ZooError(f"inception_weights={file}: not a plain state dict ({type(state).__name__})")
        from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

        try:
            net = FeatureExtractorInceptionV3("inception-v3-compat", ["2048"], feature_extractor_weights_path=str(file))
        except RuntimeError as exc:  # another network's weights: missing keys or other shapes
            raise ZooError(f"inception_weights={file}: not torch-fidelity's Inception-v3 weights "
                           f"(pt_inception-2015-12-05; {str(exc).splitlines()[-1].strip()[:160]})") from None
        self.net = net.to(device).eval()
        self.device = device

    @torch.no_grad()
    def embed(self, images: torch.Tensor, batch: int = 100) -> np.ndarray:
        """Images in [-1, 1]; greyscale is repeated to 3 channels; the net resizes to 299 itself."""
        out = []
        for i in range(0, len(images), batch):
            x = to_uint8(images[i:i + batch])
            x = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
            out.append(self.net(x.to(self.device))[0].double().cpu())
        return torch.cat(out).numpy()


def fid(features_a: np.ndarray, features_b: np.ndarray) -> float:
    return metrics.frechet_distance(*metrics.gaussian_fit(features_a), *metrics.gaussian_fit(features_b))


# =============================================================================================
# Training
# =============================================================================================

@recipe("diffusion/ddpm", config=DiffusionConfig, benchmark="mnist", metric="fid_zoo", higher_is_better=False,
        budget="60s", summary="DDPM: cosine schedule, v target (or eps), diffusers U-Net sized for the budget, EMA, DDIM sampling")
@recipe("diffusion/flow", config=DiffusionConfig, benchmark="mnist", metric="fid_zoo", higher_is_better=False,
        budget="60s", summary="flow matching: straight noise-to-data paths, velocity target, EMA, Heun (or Euler) sampling",
        defaults={"method": "flow"})
@recipe("diffusion/ddpm-cfg", config=DiffusionConfig, benchmark="mnist", metric="fid_zoo", higher_is_better=False,
        budget="60s", summary="class-conditional DDPM: 10% label dropout, classifier-free guidance 1.5 at sampling",
        defaults={"conditional": True})
@recipe("diffusion/flow-cfg", config=DiffusionConfig, benchmark="mnist", metric="fid_zoo", higher_is_better=False,
        budget="60s", summary="class-conditional flow matching: 10% label dropout, classifier-free guidance 1.5",
        defaults={"method": "flow", "conditional": True})
def train(cfg: DiffusionConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device)
    sampler, steps = resolve_sampler(cfg)  # a wrong sampler fails before the data loads
    for key in ("n_samples", "n_real", "sample_batch"):
        if getattr(cfg, key) < 2:
            raise ZooError(f"{key}={getattr(cfg, key)}: must be at least 2")
    if not 0 <= cfg.cond_drop < 1:
        raise ZooError(f"cond_drop={cfg.cond_drop}: must be in [0, 1)")
    # a bad weights file fails before the data loads and the fid_zoo classifier trains
    inception = InceptionFeatures(cfg.inception_weights, device) if cfg.inception_weights else None
    data = load_data(cfg, run)
    if len(data.classes) < 2:  # before the network is sized and built: fid_zoo's classifier needs two classes
        raise ZooError(f"data={cfg.data}: one class folder ({data.classes[0]!r}); fid_zoo trains its feature "
                       "classifier on class labels: put the images in two or more class subfolders")
    flip = cfg.flip if cfg.flip != "auto" else ("off" if data.name in ("digits", "mnist") else "on")
    channels, size = data.train_x.shape[1], data.train_x.shape[-1]
    num_classes = len(data.classes)
    null = num_classes
    run.inspect(train=(data.train_x, data.train_y), val=(data.test_x, data.test_y), task="classification",
                num_classes=num_classes)
    width = distributed.broadcast_object(choose_width(cfg, run.budget, channels, size, num_classes, device, run.log))
    model = build_unet(cfg, width, channels, size, num_classes).to(device)
    run.log(f"{data.name}: {len(data.train_y)} train / {len(data.test_y)} held-out images {tuple(data.train_x.shape[1:])}, "
            f"{num_classes} classes; U-Net widths {model.config.block_out_channels}, "
            f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params; {cfg.method}"
            f"{' (' + cfg.prediction + ', ' + cfg.noise_schedule + ')' if cfg.method == 'ddpm' else ''}, "
            f"{sampler} {steps} steps ({network_evaluations(sampler, steps)} network evaluations)"
            f"{f', guidance {cfg.guidance}' if cfg.conditional else ''}")

    # FID references: the held-out real images; the floor puts as many training images as there are
    # generated ones against them (the same sample sizes, so the same estimator bias).
    n_real = min(cfg.n_real, len(data.test_y))
    real = to_model_range(data.test_x[:n_real])
    floor_idx = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(0))[:cfg.n_samples]
    feats, net_acc = feature_net(data, run.log)
    extractors = {"fid_zoo": feats}
    if inception is not None:
        extractors["fid"] = inception
        run.set_metric("fid", higher_is_better=False)
    real_features = {k: e.embed(real) for k, e in extractors.items()}
    floors = {f"{k}_floor": fid(e.embed(to_model_range(data.train_x[floor_idx])), real_features[k])
              for k, e in extractors.items()}
    run.log(f"floor ({len(floor_idx)} training images against {n_real} held-out): "
            + ", ".join(f"{k} {v:.3f}" for k, v in floors.items()))

    # Generated labels follow the held-out classes (conditional runs).
    gen_labels = data.test_y[torch.arange(cfg.n_samples) % len(data.test_y)] if cfg.conditional else None

    def evaluate(ema_model) -> dict[str, float]:
        images = sample(ema_model, cfg, cfg.n_samples, (channels, size, size), gen_labels, null, device, seed=run.seed)
        return {k: fid(e.embed(images), real_features[k]) for k, e in extractors.items()}

    scheduler = noise_scheduler(cfg)
    scheduler.alphas_cumprod = scheduler.alphas_cumprod.to(device)  # indexed by the batch's timesteps

    def augment(batch, g):
        x, y = batch
        if flip == "on":
            mask = torch.rand(len(x), generator=g, device=g.device) < 0.5
            x = torch.where(mask.view(-1, 1, 1, 1), x.flip(-1), x)
        return x, y

    def loss_fn(model, batch) -> torch.Tensor:
        x, y = batch
        x0 = to_model_range(x.to(device, non_blocking=True))
        labels = drop_labels(y.to(device), null, cfg.cond_drop) if cfg.conditional else None
        if cfg.method == "ddpm":
            return diffusion_loss(model, x0, labels, cfg, scheduler)
        return flow_loss(model, x0, labels, cfg)

    from recipe_zoo.core.batches import TensorBatches

    batches = TensorBatches((data.train_x, data.train_y), cfg.batch_size, seed=run.seed, transform=augment)
    optimizer = build_optimizer(cfg, model)
    lr_schedule = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup)
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr_schedule),
                 settings=LoopSettings.of(cfg))
    ema_model = result.eval_model
    save_grid(ema_model, cfg, data, (channels, size, size), null, device, run)
    export_safetensors(ema_model, run.dir / "model.safetensors",
                       metadata={"recipe": run.spec.name, "unet_config": str(dict(model.config))})
    nfe = network_evaluations(sampler, steps)
    run.report("sampling", f"{sampler}, {steps} steps, {nfe} network evaluations per image"
               + (f", guidance {cfg.guidance}" if cfg.conditional else ""))
    run.report("fid_samples", f"{cfg.n_samples} generated vs {n_real} held-out real")
    return {**result.stats(), **result.metrics, **floors, "fid_zoo_net_accuracy": net_acc, "sample_nfe": nfe}


def save_grid(model, cfg: DiffusionConfig, data, shape, null: int, device, run) -> None:
    """samples.png: ``grid`` images (conditional runs: a row per class)."""
    from torchvision.utils import save_image

    if cfg.grid <= 0:
        return
    if cfg.conditional:
        per_class = max(1, cfg.grid // len(data.classes))
        labels = torch.arange(len(data.classes)).repeat_interleave(per_class)
        nrow = per_class
    else:
        labels, nrow = None, max(1, int(math.sqrt(cfg.grid)))
    n = len(labels) if labels is not None else cfg.grid
    was_training = model.training
    model.eval()
    images = sample(model, dataclasses.replace(cfg, sample_batch=max(2, n)), n, shape, labels, null, device,
                    seed=run.seed + 1)
    model.train(was_training)
    save_image((images + 1) / 2, run.dir / "samples.png", nrow=nrow, padding=1)
    run.log(f"samples: {run.dir / 'samples.png'}")
