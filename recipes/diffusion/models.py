"""Diffusion networks: the U-Net that denoises (diffusers' UNet2DModel, sized for the budget) and the networks
whose features the FID compares: a small classifier trained on the training split (``fid_zoo``) or
torch-fidelity's Inception-v3 (``fid``). ``cfg`` is the recipe's config (``DiffusionConfig`` in ``ddpm.py``)."""
from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import devices, metrics
from recipe_zoo.core.checkpoint import read_weights
from recipe_zoo.core.flops import computed_cache_root, counting_flops
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.diffusion.data import load_data, to_model_range, to_uint8

# =============================================================================================
# Network: diffusers' UNet2DModel, sized for the budget
# =============================================================================================

def build_unet(cfg, width: int, channels: int, size: int, num_classes: int) -> nn.Module:
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


def choose_width(cfg, budget, channels: int, size: int, num_classes: int, device, log) -> tuple[int, str]:
    """The widest U-Net that trains ``min_steps`` steps in a time budget, predicted from its counted
    FLOPs per step on the device's profile (``core.devices``, ``diffusers_unet`` work: its share of the measured,
    cached peak and no latency on a CPU; on a GPU a per-step latency too): the same answer on every run of a machine,
    where timing a few steps would flip between widths near the threshold. Step and epoch budgets: width 32.
    ``device``: a torch device, or a ``DeviceProfile`` (``zoo plan``). Returns the width and the reason.

    A wider net with fewer steps beat a narrower one with more, so ``min_steps`` is a floor, not a goal
    (docs/LOG.md#2026-11-30-diffusion-lr-and-width; measured under protocol 1, kept until re-measured on validation)."""
    if cfg.width:
        return cfg.width, "width set by you"
    if budget.kind != "seconds":
        return 32, "a step or epoch budget: width 32"
    profile = device if isinstance(device, devices.DeviceProfile) else \
        devices.for_device(device, precision=cfg.precision, compiled=cfg.compile)  # bf16's or compile's shares
    if profile.peak_source == "assumed":  # an accelerator missing from the peak table
        log(f"no peak FLOP/s known for {device}: width 32 (set width= to size the net yourself)")
        return 32, "no peak FLOP/s known for this device: width 32"
    width, row, why = width_choice(cfg, budget.amount, channels, size, num_classes, profile)
    log(f"width {width}: {row['step_flops'] / 1e9:.1f} GFLOP per step, ~{row['steps']:.0f} steps predicted "
        f"in {budget.amount:.0f}s at {row['rate'] / 1e9:.0f} GFLOP/s on {profile.name} ({why})")
    return width, why


def width_choice(cfg, seconds: float, channels: int, size: int, num_classes: int, profile) -> tuple[int, dict, str]:
    """The widest of ``WIDTHS`` that gets ``min_steps`` steps in ``seconds`` on ``profile``, its ``width_row`` and
    the reason; the narrowest when none does."""
    for width in WIDTHS:
        row = width_row(cfg, width, channels, size, num_classes, seconds, profile)
        if row["steps"] >= cfg.min_steps:
            return width, row, (f"the widest on offer ({WIDTHS[0]}) gets" if width == WIDTHS[0] else
                                "the widest that gets") + f" min_steps={cfg.min_steps}"
    return width, row, f"the narrowest on offer: no width gets min_steps={cfg.min_steps}"


def width_row(cfg, width: int, channels: int, size: int, num_classes: int, seconds: float, profile) -> dict:
    """What a U-Net of ``width`` costs on ``profile``: its parameters, counted FLOPs per optimizer step (on 2
    images, scaled to the batch) and the steps ``seconds`` buy."""
    model = build_unet(cfg, width, channels, size, num_classes)
    x, t = torch.zeros(2, channels, size, size), torch.zeros(2, dtype=torch.long)
    labels = torch.zeros(2, dtype=torch.long) if cfg.conditional else None
    with counting_flops() as counter:
        model(x, t, class_labels=labels).sample.sum().backward()
    step_flops = counter.get_total_flops() / 2 * cfg.batch_size * cfg.accum_steps
    rate = profile.rate("diffusers_unet")
    return {"width": width, "params": sum(p.numel() for p in model.parameters()), "step_flops": step_flops,
            "rate": rate, "steps": seconds * rate / (step_flops + profile.latency("diffusers_unet") * rate)}


def size_hook(cfg, run, profile) -> dict:
    """``zoo plan --recipe diffusion/flow --budget B --gpu NAME``: the width a run would choose there, on the data
    as a run reads it."""
    data = load_data(cfg, run)
    channels, size, num_classes = data.train_x.shape[1], data.train_x.shape[-1], len(data.classes)
    width, reason = choose_width(cfg, run.budget, channels, size, num_classes, profile, log=lambda *a, **k: None)
    seconds = run.budget.amount if run.budget.kind == "seconds" else 0.0
    row = width_row(cfg, width, channels, size, num_classes, seconds, profile)
    samples = row["steps"] * cfg.batch_size * cfg.accum_steps
    widths = tuple(width * min(2 ** i, 4) for i in range(cfg.levels))
    out = {"work": "diffusers_unet", "shape": f"U-Net widths {widths}, {channels}x{size}x{size} images",
           "batch": f"{cfg.batch_size * cfg.accum_steps} images a step", "params": row["params"],
           "data": f"{len(data.train_x):,} training images", "reason": reason}
    if seconds:
        out |= {"steps": row["steps"], "rate": f"{samples / seconds:,.0f} images/s",
                "data": f"{len(data.train_x):,} training images ({samples / len(data.train_x):.1f} epochs)"}
    return out


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
    return computed_cache_root() / "features" / "fid_zoo"


def feature_net(data, log, epochs: int = 8) -> tuple[FeatureNet, float]:
    """The fid_zoo feature network for this training split: trained on the CPU with a fixed seed and
    number of epochs (the same network on every machine), cached by the split's content hash.
    Returns it and its accuracy on validation (the test images are not read)."""
    from safetensors.torch import load_file, save_file

    digest = hashlib.sha256()
    for t in (data.train_x, data.train_y, data.val_x, data.val_y):
        digest.update(t.contiguous().numpy().tobytes())
    key = f"{data.name}-v{FeatureNet.VERSION}-{digest.hexdigest()[:16]}"
    path = fid_cache_dir() / f"{key}.safetensors"
    num_classes = int(max(data.train_y.max(), data.val_y.max())) + 1
    if num_classes < 2:
        raise ZooError(f"data={data.name}: fid_zoo trains its feature classifier on class labels, and this data has "
                       "one class; put the images in class subfolders, or pass inception_weights=PATH")
    net = FeatureNet(data.train_x.shape[1], num_classes)
    if path.is_file():
        try:
            net.load_state_dict(load_file(str(path)))
            net.eval()
            acc = metrics.accuracy(net(to_model_range(data.val_x)), data.val_y)
            log(f"fid_zoo features: cached classifier {path} (validation accuracy {acc:.4f})")
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
        acc = metrics.accuracy(net(to_model_range(data.val_x)), data.val_y)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the ranks of a torchrun job may write at once
    save_file(net.state_dict(), str(tmp))
    tmp.replace(path)
    log(f"fid_zoo features: trained a classifier on {len(y)} training images ({epochs} epochs, CPU, seed 0), "
        f"validation accuracy {acc:.4f}; cached at {path}")
    return net, acc


def fid(features_a: np.ndarray, features_b: np.ndarray) -> float:
    return metrics.frechet_distance(*metrics.gaussian_fit(features_a), *metrics.gaussian_fit(features_b))


# Each round a Gaussian fit and two eigendecompositions (~25 ms): 200 rounds, not the usual 1,000. Resampled
# with replacement, a test set holds ~63% distinct images, so bootstrap FIDs sit a little above the value (FID's
# small-sample bias): the interval is skewed upwards, most at the floor.
BOOTSTRAP_ROUNDS = 200


def fids_on_test(generated: dict, train: dict, extractors: dict, real: torch.Tensor) -> dict[str, float]:
    """The test FIDs, scored once at the end: the generated images' features (``generated``, per extractor)
    against the test images ``real`` (in [-1, 1]), the floor (``train``: as many training images) against
    them, and fid_zoo's 95% bootstrap interval over the test images (the generated side held fixed)."""
    out = {}
    for k, extractor in extractors.items():
        features = extractor.embed(real)
        out[f"test_{k}"], out[f"test_{k}_floor"] = fid(generated[k], features), fid(train[k], features)
        if k == "fid_zoo":
            from threadpoolctl import threadpool_limits

            gen_fit = metrics.gaussian_fit(generated[k])
            with threadpool_limits(1):  # 128-wide matrices: BLAS threads only wait on each other (60x slower)
                out["test_fid_zoo_ci_low"], out["test_fid_zoo_ci_high"] = metrics.bootstrap(
                    lambda idx: metrics.frechet_distance(*gen_fit, *metrics.gaussian_fit(features[idx])),
                    len(features), rounds=BOOTSTRAP_ROUNDS)
    return out


class InceptionFeatures:
    """torch-fidelity's Inception-v3 (the standard FID network), from a local weights file."""

    def __init__(self, path: str, device):
        import tempfile

        file = Path(path)
        # one reader: the safe loader reads the file once; torch-fidelity (weights_only=False) gets those tensors,
        # saved again in a private folder, never the user's path (which could change between two reads)
        state = read_weights(file, key="inception_weights")
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise ZooError(f"inception_weights={file}: not a plain state dict of tensors ({type(state).__name__})")
        from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

        try:
            with tempfile.TemporaryDirectory(prefix="zoo-inception-") as tmp:
                checked = Path(tmp) / "checked.pth"
                torch.save(state, checked)
                net = FeatureExtractorInceptionV3("inception-v3-compat", ["2048"],
                                                  feature_extractor_weights_path=str(checked))
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


# =============================================================================================
# The saved U-Net: its config for model.json, and the model back from it
# =============================================================================================

def unet_config(model) -> dict:
    """UNet2DModel's constructor arguments (``UNet2DModel.from_config`` rebuilds it)."""
    return {k: v for k, v in dict(model.config).items() if not k.startswith("_")}


def load_unet(card: dict, path: Path, device) -> nn.Module:
    """The run's U-Net (``model.json``'s ``unet`` config) with its saved weights, in eval mode."""
    from diffusers import UNet2DModel
    from safetensors.torch import load_model

    model = UNet2DModel.from_config(card["unet"])
    try:
        load_model(model, str(path))
    except (RuntimeError, OSError) as exc:  # another shape, missing keys, a damaged file
        raise ZooError(f"{path}: does not fit the U-Net model.json describes ({str(exc).splitlines()[0][:160]})"
                       ) from None
    return model.to(device).eval()
