"""Sampling from a diffusion run's U-Net: DDPM's noise schedule, classifier-free guidance, the DDIM and flow
ODE samplers, and what is made of their images: the run's ``samples.png``, ``zoo predict``'s PNGs and grid, and
the diffusers folders ``zoo export --format pretrained`` writes. ``cfg`` is the recipe's config
(``DiffusionConfig`` in ``ddpm.py``)."""
from __future__ import annotations

import dataclasses
import math

from pathlib import Path

import torch

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.diffusion.data import to_uint8

# =============================================================================================
# Samplers
# =============================================================================================


def noise_scheduler(cfg):
    from diffusers import DDPMScheduler

    return DDPMScheduler(num_train_timesteps=cfg.timesteps,
                         beta_schedule="squaredcos_cap_v2" if cfg.noise_schedule == "cosine" else "linear",
                         prediction_type="epsilon" if cfg.prediction == "epsilon" else "v_prediction")


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


def resolve_sampler(cfg) -> tuple[str, int]:
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
def sample(model, cfg, n: int, shape: tuple, labels: torch.Tensor | None, null: int,
           device, seed: int, progress=None) -> torch.Tensor:
    """``n`` images in [-1, 1] from the EMA model, seeded (the noise is drawn on the CPU, so a seed
    gives the same starting noise on any device). ``progress(done, total, what)`` after each batch."""
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
        if progress is not None:
            progress(i + m, n, "images sampled")
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
# Images to files
# =============================================================================================

def save_grid(model, cfg, data, shape, null: int, device, run) -> None:
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


def predict_labels(label: str, classes: list[str] | None, n: int, recipe: str) -> torch.Tensor | None:
    """The class of each image ``zoo predict`` generates: ``label`` (a class name, else an index) for all of them,
    or with no label the classes in turn; None for an unconditional run (``classes`` None)."""
    if classes is None:
        if label:
            raise ZooError(f"label={label}: {recipe} is unconditional (the -cfg variants generate by class)")
        return None
    if not label:
        return torch.arange(n) % len(classes)
    if label in classes:
        return torch.full((n,), classes.index(label))
    if label.isdigit() and int(label) < len(classes):
        return torch.full((n,), int(label))
    shown = ", ".join(classes[:12]) + (", ..." if len(classes) > 12 else "")
    raise ZooError(f"label={label}: not a class of this run ({shown}) nor an index 0-{len(classes) - 1}")


def write_images(images: torch.Tensor, labels: torch.Tensor | None, classes: list[str] | None,
                 folder: Path) -> tuple[list[dict], list[Path]]:
    """Each image (in [-1, 1]) as ``NNNNN.png`` (8-bit grey or RGB) and all of them in ``grid.png`` (a column per
    class when the classes take turns, else square); a row per image: its file and, conditional, its class."""
    from PIL import Image
    from torchvision.utils import save_image

    rows, files = [], []
    for i, pixels in enumerate(to_uint8(images).permute(0, 2, 3, 1).numpy()):
        path = folder / f"{i:05d}.png"
        Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(path)
        rows.append({"file": path.name} | ({"label": classes[int(labels[i])]} if labels is not None else {}))
        files.append(path)
    cycling = labels is not None and len(set(labels.tolist())) > 1  # the classes in turn: a column each
    nrow = min(len(classes), len(images)) if cycling else max(1, math.ceil(math.sqrt(len(images))))
    save_image((images + 1) / 2, folder / "grid.png", nrow=nrow, padding=1)
    return rows, files + [folder / "grid.png"]


def save_pretrained(unet, cfg, out: Path) -> list[Path]:
    """diffusers folders: ``unet/`` (``UNet2DModel.from_pretrained(out, subfolder="unet")``) and, for DDPM, the
    DDIM scheduler the run samples with in ``scheduler/``; an unconditional DDPM run is a whole ``DDIMPipeline``
    (``model_index.json``: ``DDIMPipeline.from_pretrained(out)`` generates). Flow runs: ``unet/`` only (their
    Euler/Heun ODE on t*1000 is the recipe's sampler, not a diffusers scheduler)."""
    from diffusers import DDIMPipeline, DDIMScheduler

    out.mkdir(parents=True, exist_ok=True)
    if cfg.method == "ddpm":
        scheduler = DDIMScheduler.from_config(noise_scheduler(cfg).config, timestep_spacing="trailing")
        if not cfg.conditional:
            DDIMPipeline(unet=unet, scheduler=scheduler).save_pretrained(out)
            return sorted(p for p in out.rglob("*") if p.is_file())
        scheduler.save_pretrained(out / "scheduler")
    unet.save_pretrained(out / "unet")
    return sorted(p for p in out.rglob("*") if p.is_file())
