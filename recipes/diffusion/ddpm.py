"""Diffusion: DDPM (``diffusion/ddpm``) and flow matching (``diffusion/flow``), unconditional or
class-conditional with classifier-free guidance (``-cfg`` variants), scored by an honestly named FID.

Reads top to bottom: config, optimizer, the two objectives, predict (``zoo predict``: images from the saved
EMA U-Net) and export (diffusers folders), training. The data is in ``recipe_zoo.recipes.diffusion.data``
(images live in memory as uint8 tensors), the U-Net and the FID feature networks in
``recipe_zoo.recipes.diffusion.models``, the samplers (DDIM, Euler/Heun on the flow ODE) in
``recipe_zoo.recipes.diffusion.sampling``.

FID is the Frechet distance between Gaussian fits of features of generated and of held-out real
images (``recipe_zoo.core.metrics.frechet_distance``): validation images for every evaluation while training,
test images once at the end (the reported value). With Inception-v3 weights (``inception_weights=PATH``,
torch-fidelity's file) it is the standard ``fid``. These machines cannot download them, so every run
also reports ``fid_zoo``: the same distance on the penultimate features of a small classifier trained
(on the CPU, fixed seed and epochs, cached) on the dataset's training split. ``fid_zoo`` is another
metric than Inception FID; the two are never ranked together.
"""
from __future__ import annotations

import dataclasses
import functools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import artifact, distributed, finetune, optim, schedule
from recipe_zoo.core.batches import TensorBatches, to_device
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import (Auto, Count, Fraction, NonNegative, NonNegativeInt, Positive, Range, Share, Unit,
                                 recipe)
from recipe_zoo.recipes import image_datasets as _image_datasets  # noqa: F401  (declares the image datasets)
from recipe_zoo.recipes.diffusion import datasets as _datasets  # noqa: F401  (declares the domain's datasets)
from recipe_zoo.recipes.diffusion.data import check_fractions, load_data, resolve_flip, to_model_range, to_uint8
from recipe_zoo.recipes.diffusion.models import (InceptionFeatures, build_unet, choose_width, feature_net, fid,
                                                 fids_on_test, load_unet, size_hook, unet_config)
from recipe_zoo.recipes.diffusion.sampling import (network_evaluations, noise_scheduler, predict_labels,
                                                   resolve_sampler, sample, save_grid, save_pretrained, write_images)

# =============================================================================================
# Config
# =============================================================================================

Images = Annotated[int, Range(2)]  # two images or more (train refuses fewer: a FID's covariance needs two)


@dataclass
class DiffusionConfig(LoopSettings):
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("classes", "labels", "file_column", "label_column", "image_size",
                                             "val_fraction", "test_fraction", "conditional", "n_samples", "n_real")
    DEVICE_FIELDS: ClassVar[tuple[str, ...]] = ("width", "precision", "tf32")
    SIZING_INPUTS: ClassVar[tuple[str, ...]] = ("min_steps",)  # read only to choose the width (a device field)
    CHOSEN_ON_TEST: ClassVar[str] = ("lr and the width rule, set on the 1,000 held-out mnist images that are now "
                                     "validation and test")

    data: str = "digits"  # digits, mnist, cifar10-subset, or a folder: class subfolders, images + labels.csv, images
    labels: str = ""  # a folder's labels table (CSV, TSV, parquet; paths relative to it): '' = its labels.csv if any
    file_column: str = ""  # the labels table's file column ('' = file, filename, image, image_id, path, ...)
    label_column: str = ""  # the labels table's label column ('' = label, class, category, target, y)
    classes: str = ""  # only these classes, comma-separated names (e.g. 0,1,2: a class subset); '' = all
    image_size: NonNegativeInt = 0  # pixels per side; 0 = own (a folder: median short side rounded to 32, 32-224)
    val_fraction: Share = 0.1  # validation: this share of the images, hash-chosen (train/ + val/ or test/: of train/)
    test_fraction: Share = 0.1  # test: this share of the images, hash-chosen (data without a test split of its own)
    method: Literal["ddpm", "flow"] = "ddpm"  # denoising diffusion, or conditional flow matching
    prediction: Literal["v", "epsilon"] = "v"  # ddpm network target: v = a*eps - s*x0 (fine at low SNR), or the noise
    noise_schedule: Literal["cosine", "linear"] = "cosine"  # ddpm betas: cosine (Nichol & Dhariwal) or linear
    timesteps: Count = 1000  # ddpm training timesteps
    # logit_normal = sigmoid(n), n ~ N(0, 1), chosen on validation: docs/LOG.md#2026-12-05-flow-logit-normal-times
    flow_time: Literal["uniform", "logit_normal"] = "logit_normal"  # flow: training times t (SD3's: mid-path)
    conditional: bool = False  # class-conditional with classifier-free guidance
    cond_drop: Fraction = 0.1  # fraction of training labels replaced by the null class
    guidance: NonNegative = 1.5  # CFG scale at sampling: uncond + g * (cond - uncond); 1 = the conditional model alone
    width: NonNegativeInt = 0  # channels of the first U-Net level (x2, x4 below); 0 = the widest that the budget trains
    levels: Count = 3  # U-Net resolutions (the image side must divide by 2^(levels-1))
    layers_per_block: Count = 1  # ResNet blocks per level on the way down (one more on the way up)
    attention: bool = True  # self-attention at the lowest resolution
    min_steps: NonNegativeInt = 300  # width=0 under a time budget: the widest net predicted to get this many steps
    # lr and the width rule (models.choose_width) were set on the 1,000 held-out mnist images under protocol 1,
    # which are now validation and test: kept until re-measured on validation.
    lr: Positive = 1e-3  # AdamW LR, for budgets of minutes: docs/LOG.md#2026-11-30-diffusion-lr-and-width
    weight_decay: NonNegative = 0.01  # decoupled, on weights only (never biases, norms, embeddings)
    batch_size: Count = 64
    schedule: Literal["constant", "cosine", "wsd", "linear"] = "constant"  # LR shape; EMA does the averaging
    warmup: Unit = 0.0  # fraction of the budget warming up (none: clipping and the EMA keep the start stable)
    flip: Literal["auto", "on", "off"] = "auto"  # horizontal flips in training; auto = on, except digits
    sampler: Literal["auto", "ddim", "euler", "heun"] = "auto"  # auto: ddim for ddpm, heun for flow
    sample_steps: NonNegativeInt = 0  # sampler steps; 0 = ddim 50, euler 50, heun 25 (49 network evaluations)
    eta: Unit = 0.0  # DDIM stochasticity (0 = deterministic)
    n_samples: Images = 1000  # generated images the FID uses (fixed per benchmark so runs compare)
    n_real: Images = 1000  # real images each FID uses, validation and test alike (at most the smaller of the two)
    sample_batch: Images = 500  # images per sampling forward pass
    grid: NonNegativeInt = 64  # images in samples.png (0 = none)
    inception_weights: str = ""  # torch-fidelity's pt_inception-2015-12-05 file: adds the standard `fid`
    ema_decay: Fraction = 0.999  # EMA weights are used for sampling and evaluation (decay warmed up)
    weights: str = ""  # fine-tune from a finished diffusion run (its folder): its U-Net, objective and image size
    clip_grad: NonNegative = 1.0
    eval_every: Unit = 0.0  # fraction of the budget between validation FID evaluations (0 = only at the end)


def check_config(cfg: DiffusionConfig) -> None:
    """Values that would fail late are refused before any data loads."""
    for key in ("n_samples", "n_real", "sample_batch"):
        if getattr(cfg, key) < 2:
            raise ZooError(f"{key}={getattr(cfg, key)}: must be at least 2")
    if not 0 <= cfg.cond_drop < 1:
        raise ZooError(f"cond_drop={cfg.cond_drop}: must be in [0, 1)")
    check_fractions(cfg.val_fraction, cfg.test_fraction)


# =============================================================================================
# Optimizer
# =============================================================================================

def build_optimizer(cfg: DiffusionConfig, model: nn.Module) -> torch.optim.Optimizer:
    groups = optim.decay_groups(model, cfg.weight_decay)  # no decay on biases, norms, class embeddings
    optim.assert_covers(model, [g["params"] for g in groups])
    return optim.adamw(groups, cfg.lr, betas=(0.9, 0.999))


# =============================================================================================
# Objectives and the training images' flips (the samplers are in sampling.py)
# =============================================================================================

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


def objective(cfg: DiffusionConfig, scheduler, null: int, device):
    """The loss of a batch (uint8 images, labels): ``diffusion_loss`` or ``flow_loss`` of the images in the model's
    range, conditioned (``-cfg`` runs) on the labels with a ``cond_drop`` share of them dropped to the null class."""

    def loss_fn(model, batch) -> torch.Tensor:
        x, y = batch
        x0 = to_model_range(to_device(x, device))
        labels = drop_labels(to_device(y, device), null, cfg.cond_drop) if cfg.conditional else None
        if cfg.method == "ddpm":
            return diffusion_loss(model, x0, labels, cfg, scheduler)
        return flow_loss(model, x0, labels, cfg)

    return loss_fn


def random_flip(batch, g: torch.Generator, flip: str):
    """Training's augmentation: with ``flip`` on, each image mirrored with probability 1/2."""
    x, y = batch
    if flip == "on":
        mask = torch.rand(len(x), generator=g, device=g.device) < 0.5
        x = torch.where(mask.view(-1, 1, 1, 1), x.flip(-1), x)
    return x, y


# =============================================================================================
# Predict and export: images from the saved EMA U-Net (model.json says how the run sampled)
# =============================================================================================

@dataclass
class GenerateOptions(artifact.PredictOptions):
    data: str = ""  # not read: the images come from noise (n, label, seed say which)
    n: Count = 64  # images to generate
    label: str = ""  # -cfg runs: a class name (else an index) for every image; '' = the classes in turn
    steps: NonNegativeInt = 0  # sampler steps; 0 = the run's (sample_steps)
    guidance: Auto = -1.0  # -cfg runs: classifier-free guidance scale; -1 = the run's
    seed: Annotated[int, Range(-1)] = -1  # noise seed; -1 = the run's. The same seed and batch give the same images


def generate(cfg: DiffusionConfig, opts: GenerateOptions, run) -> artifact.Predictions:
    """``n`` images sampled as the run's evaluation sampled (its sampler, steps, guidance, precision):
    ``NNNNN.png`` and ``grid.png`` in ``run.files_dir``, a row per image (file; -cfg runs: its class)."""
    card = run.card
    if opts.data:
        raise ZooError(f"data={opts.data}: {card['recipe']} generates from noise and reads no data (n=, label=, seed=)")
    if opts.guidance >= 0 and not cfg.conditional:
        raise ZooError(f"guidance={opts.guidance:g}: {card['recipe']} is unconditional (no guidance to set)")
    classes, pre = card["classes"], card["preprocess"]
    labels = predict_labels(opts.label, classes, opts.n, card["recipe"])
    cfg = dataclasses.replace(cfg, sample_steps=opts.steps or cfg.sample_steps, sample_batch=opts.batch_size or
                              cfg.sample_batch, guidance=cfg.guidance if opts.guidance < 0 else opts.guidance)
    device = choose_device(run.device)
    model = load_unet(card, run.path("model.safetensors"), device)
    with autocast(device, resolve_precision(device, cfg.precision)):
        images = sample(model, cfg, opts.n, (pre["channels"], pre["image_size"], pre["image_size"]), labels,
                        len(classes or []), device, run.seed if opts.seed < 0 else opts.seed, progress=run.progress)
    rows, files = write_images(images, labels, classes, run.files_dir)
    arrays = {"images": to_uint8(images).numpy(), **({"labels": labels.numpy()} if labels is not None else {})}
    return artifact.Predictions(rows=rows, files=files, arrays=arrays)


def export_pretrained(cfg: DiffusionConfig, run, out: Path) -> list[Path]:
    """diffusers folders (``sampling.save_pretrained``) of the EMA U-Net, and model.json beside them."""
    written = save_pretrained(load_unet(run.card, run.path("model.safetensors"), "cpu"), cfg, out)
    return [*written, Path(shutil.copy2(run.path(artifact.CARD), out / artifact.CARD))]



# =============================================================================================
# Fine-tuning from a run: the network and what it predicts are the source's
# =============================================================================================

RECIPES = ("diffusion/ddpm", "diffusion/flow", "diffusion/ddpm-cfg", "diffusion/flow-cfg")
# What must match the source: the U-Net's shape and what it was trained to predict (a flow's velocity is not a
# DDPM's v), and whether it takes class labels. The data must have the source's image size and channels (and, for a
# conditional source, its number of classes). The optimizer, schedule, EMA and sampler are this run's.
SOURCE_FIELDS = ("levels", "layers_per_block", "attention", "prediction", "noise_schedule", "timesteps")
RECIPE_FIELDS = ("method", "conditional")  # what each of the four recipes is: never taken over from the source


def from_source(cfg: DiffusionConfig, source: finetune.Source, log) -> DiffusionConfig:
    for name in RECIPE_FIELDS:
        if name in source.config and getattr(cfg, name) != source.config[name]:
            raise ZooError(f"{name}={getattr(cfg, name)}: the source run {source.folder} was trained with "
                           f"{name}={source.config[name]}; fine-tune it with {source.card['recipe']}")
    theirs = {name: source.config[name] for name in SOURCE_FIELDS if name in source.config}
    theirs["width"] = source.card["unet"]["block_out_channels"][0]
    cfg = finetune.inherit(cfg, source, theirs, "U-Net and objective")
    log(f"fine-tuning from {source.folder}: its U-Net (width {cfg.width}) and {cfg.method} objective")
    return cfg


def source_model(source: finetune.Source, channels: int, size: int, num_classes: int, device) -> nn.Module:
    """The source's EMA U-Net, when this data fits it (one line naming what differs otherwise)."""
    pre, classes = source.card["preprocess"], source.card.get("classes")
    if (pre["image_size"], pre["channels"]) != (size, channels):
        raise ZooError(f"weights={source.folder}: trained on {pre['image_size']} px images with {pre['channels']} "
                       f"channel(s), and this data is {size} px with {channels}: set image_size={pre['image_size']} "
                       "(or fine-tune from a run on images like these)")
    if classes is not None and len(classes) != num_classes:
        raise ZooError(f"weights={source.folder}: a class-conditional U-Net of {len(classes)} classes, and this data "
                       f"has {num_classes}")
    return load_unet(source.card, source.path("model.safetensors"), device).train()


# =============================================================================================
# Training
# =============================================================================================

# precision=auto on a CPU: fp32 (bf16 slower: docs/LOG.md#2026-12-03-cpu-sizing-per-dtype).
# compile: off by default (no speed-up on mnist at 5m: docs/LOG.md#2026-12-04-cpu-compile-diffusion-medical).
@recipe("diffusion/ddpm", config=DiffusionConfig, benchmark="mnist", metric="test_fid_zoo", budget="60s",
        higher_is_better=False, predict=generate, predict_options=GenerateOptions,
        exports={"pretrained": export_pretrained}, hooks={"size": size_hook},
        summary="DDPM: cosine schedule, v target (or eps), diffusers U-Net sized for the budget, EMA, DDIM sampling")
@recipe("diffusion/flow", config=DiffusionConfig, benchmark="mnist", metric="test_fid_zoo", budget="60s",
        higher_is_better=False, predict=generate, predict_options=GenerateOptions,
        exports={"pretrained": export_pretrained}, hooks={"size": size_hook},
        summary="flow matching: straight noise-to-data paths, velocity target, EMA, Heun (or Euler) sampling",
        defaults={"method": "flow"})
@recipe("diffusion/ddpm-cfg", config=DiffusionConfig, benchmark="mnist", metric="test_fid_zoo", budget="60s",
        higher_is_better=False, predict=generate, predict_options=GenerateOptions,
        exports={"pretrained": export_pretrained}, hooks={"size": size_hook},
        summary="class-conditional DDPM: 10% label dropout, classifier-free guidance 1.5 at sampling",
        defaults={"conditional": True})
@recipe("diffusion/flow-cfg", config=DiffusionConfig, benchmark="mnist", metric="test_fid_zoo", budget="60s",
        higher_is_better=False, predict=generate, predict_options=GenerateOptions,
        exports={"pretrained": export_pretrained}, hooks={"size": size_hook},
        summary="class-conditional flow matching: 10% label dropout, classifier-free guidance 1.5",
        defaults={"method": "flow", "conditional": True})
def train(cfg: DiffusionConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device, tf32=cfg.tf32)
    sampler, steps = resolve_sampler(cfg)  # a wrong sampler fails before the data loads
    source = finetune.read_source(cfg.weights, RECIPES) if cfg.weights else None
    if source is not None:
        cfg = from_source(cfg, source, run.log)
    check_config(cfg)
    # a bad weights file fails before the data loads and the fid_zoo classifier trains
    inception = InceptionFeatures(cfg.inception_weights, device) if cfg.inception_weights else None
    data = load_data(cfg, run)
    if source is not None:  # scored on images the source never trained on
        finetune.check_unseen(source, data.keys["test"], "images")
    if len(data.classes) < 2:  # before the network is sized and built: fid_zoo's classifier needs two classes
        raise ZooError(f"data={cfg.data}: one class folder ({data.classes[0]!r}); fid_zoo trains its feature "
                       "classifier on class labels: put the images in two or more class subfolders")
    flip = resolve_flip(cfg.flip, data.name)
    channels, size = data.train_x.shape[1], data.train_x.shape[-1]
    num_classes = len(data.classes)
    null = num_classes
    run.record_split(data.keys)
    run.report("split", data.how)
    run.inspect(train=(data.train_x, data.train_y), val=(data.val_x, data.val_y), task="classification",
                num_classes=num_classes, fine_tune=source is not None)
    width = distributed.broadcast_object(choose_width(cfg, run.budget, channels, size, num_classes, device, run.log)[0])
    model = (build_unet(cfg, width, channels, size, num_classes).to(device) if source is None else
             source_model(source, channels, size, num_classes, device))
    run.log(f"{data.name}: {data.sizes()} images {tuple(data.train_x.shape[1:])}, "
            f"{num_classes} classes; U-Net widths {model.config.block_out_channels}, "
            f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params; {cfg.method}"
            f"{' (' + cfg.prediction + ', ' + cfg.noise_schedule + ')' if cfg.method == 'ddpm' else ''}, "
            f"{sampler} {steps} steps ({network_evaluations(sampler, steps)} network evaluations)"
            f"{f', guidance {cfg.guidance}' if cfg.conditional else ''}")

    # FID references: validation images while training, test images once at the end, as many of each (so the
    # two share the estimator's bias); the floor puts as many training images as there are generated ones
    # against them (the same sample sizes, so the same bias).
    n_real = min(cfg.n_real, len(data.val_y), len(data.test_y))
    floor_idx = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(0))[:cfg.n_samples]
    feats, net_acc = feature_net(data, run.log)
    extractors = {"fid_zoo": feats}
    if inception is not None:
        extractors["fid"] = inception
        run.set_metric("test_fid", higher_is_better=False)
    val_features = {k: e.embed(to_model_range(data.val_x[:n_real])) for k, e in extractors.items()}
    train_features = {k: e.embed(to_model_range(data.train_x[floor_idx])) for k, e in extractors.items()}
    floors = {f"val_{k}_floor": fid(train_features[k], val_features[k]) for k in extractors}
    run.log(f"floor ({len(floor_idx)} training images against {n_real} validation): "
            + ", ".join(f"{k} {v:.3f}" for k, v in floors.items()))

    # Generated labels follow the validation classes (conditional runs).
    gen_labels = data.val_y[torch.arange(cfg.n_samples) % len(data.val_y)] if cfg.conditional else None
    generated = {}

    def evaluate(ema_model) -> dict[str, float]:
        images = sample(ema_model, cfg, cfg.n_samples, (channels, size, size), gen_labels, null, device, seed=run.seed)
        generated["last"] = {k: e.embed(images) for k, e in extractors.items()}
        return {f"val_{k}": fid(f, val_features[k]) for k, f in generated["last"].items()}

    scheduler = noise_scheduler(cfg)
    scheduler.alphas_cumprod = scheduler.alphas_cumprod.to(device)  # indexed by the batch's timesteps
    loss_fn = objective(cfg, scheduler, null, device)
    batches = TensorBatches((data.train_x, data.train_y), cfg.batch_size, seed=run.seed,
                            transform=functools.partial(random_flip, flip=flip))
    optimizer = build_optimizer(cfg, model)
    lr_schedule = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup)
    start = {}
    if source is not None:  # the source's U-Net sampled and scored on validation before the first step
        scores = finetune.score_start(model, evaluate, device, resolve_precision(device, cfg.precision))
        start = {f"{k}_start": v for k, v in scores.items()}
        generated.clear()  # the test reads the trained model's images, never these
        run.log("before fine-tuning (the source's U-Net): " + ", ".join(f"{k} {v:.4f}" for k, v in start.items()))
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr_schedule),
                 settings=LoopSettings.of(cfg))
    ema_model = result.eval_model
    # Test, once: the images fit's last evaluation generated from the final EMA model (seeded: a run resumed
    # after that evaluation generates the same ones again) against the test images.
    if "last" not in generated:
        with autocast(device, resolve_precision(device, cfg.precision)):
            evaluate(ema_model.eval())
    test = fids_on_test(generated["last"], train_features, extractors, to_model_range(data.test_x[:n_real]))
    save_grid(ema_model, cfg, data, (channels, size, size), null, device, run)
    export_safetensors(ema_model, run.dir / "model.safetensors",
                       metadata={"recipe": run.spec.name, "unet_config": str(dict(model.config))})
    artifact.write_card(run.dir, recipe=run.spec.name, task="generation", weights=["model.safetensors"],
                        selected="ema" if cfg.ema_decay > 0 else "final", unet=unet_config(model),
                        classes=data.classes if cfg.conditional else None,
                        preprocess={"image_size": size, "channels": channels, "range": "[-1, 1]: uint8 / 127.5 - 1"},
                        evaluation={"method": cfg.method, "sampler": sampler, "steps": steps, "eta": cfg.eta,
                                    "guidance": cfg.guidance if cfg.conditional else None,
                                    "null_class": null if cfg.conditional else None, "seed": run.seed},
                        **({"source": finetune.provenance(source)} if source is not None else {}))
    nfe = network_evaluations(sampler, steps)
    run.report("sampling", f"{sampler}, {steps} steps, {nfe} network evaluations per image"
               + (f", guidance {cfg.guidance}" if cfg.conditional else ""))
    run.report("fid_samples", f"{cfg.n_samples} generated vs {n_real} real (validation while training, test at "
                              "the end)")
    return {**result.stats(), **start, **result.metrics, **test, **floors, "fid_zoo_net_accuracy": net_acc,
            "sample_nfe": nfe}
