"""Self-supervised image representations: SimCLR (``contrastive/simclr``) and BYOL (``contrastive/byol``).

Reads top to bottom: config, losses, optimizer, predict (images to embeddings), training; the data and its two-view
augmentation are in ``contrastive.data``, the networks in ``contrastive.models``, the frozen-feature evaluation (kNN
and a linear probe) in ``contrastive.evaluation``. Labels are only ever used for evaluation. What a run keeps is the
backbone: the projection head (and BYOL's predictor and target network) are discarded, and ``model.safetensors``
holds the backbone in the layout ``vision/resnet weights=RUN_DIR`` loads for fine-tuning; ``model.json`` says how
inputs are scaled, and ``embeddings.npy`` holds the test images' embeddings (the rows of ``predictions.csv``), what
``zoo predict RUN_DIR`` recomputes.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import artifact, distributed, finetune, optim, schedule
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.distributed import unwrap
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import Auto, Count, Fraction, NonNegative, NonNegativeInt, Positive, Range, Share, Unit, recipe
from recipe_zoo.recipes import backbones, image_datasets as _image_datasets  # noqa: F401  (declares the image datasets)
from recipe_zoo.recipes.image_files import item_names, list_images, read_images
from recipe_zoo.recipes.images import resize_splits
from recipe_zoo.recipes.contrastive.data import (SSLData, build_augment, describe_augment, eval_splits, load_data,
                                                 normalizer, resolve_auto, two_views)
from recipe_zoo.recipes.contrastive.evaluation import extract_features, knn_rows, score_features
from recipe_zoo.recipes.contrastive.models import (SSLModel, build_backbone, byol_momentum, check_views, export_timm,
                                                   load_backbone, mlp, update_target)


# =============================================================================================
# Config
# =============================================================================================

AutoUnit = Annotated[float, Range(-1, 1)]  # -1 (the recipe's choice), else in [0, 1] (check_config: not between)
Jitter = Annotated[float, Range(0, 2)]  # at most 2: the hue jitter, a quarter of it, must stay within kornia's 0.5


@dataclass
class ContrastiveConfig(LoopSettings):
    CHOSEN_ON_TEST: ClassVar[str] = "batch_size=128, read off kNN accuracy on the test queries"
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("eval_data", "labels", "file_column", "label_column", "val_fraction",
                                             "test_fraction", "knn_k", "knn_temperature", "probe_c")
    BATCH_IN_LOSS: ClassVar[bool] = True  # the micro-batch is the negatives: out of memory never halves it

    method: Literal["simclr", "byol"] = "simclr"  # simclr (negatives, NT-Xent) | byol (EMA target + predictor)
    data: str = "digits"  # digits, mnist-test, cifar10-subset, or a folder (classes, labels.csv; unlabelled: eval_data)
    eval_data: str = ""  # labelled class folder(s) for evaluation; '' = the labelled splits of data
    labels: str = ""  # a folder's labels table (CSV, TSV, parquet; paths relative to it): '' = its labels.csv if any
    file_column: str = ""  # the labels table's file column ('' = file, filename, image, image_id, path, ...)
    label_column: str = ""  # the labels table's label column ('' = label, class, category, target, y)
    image_size: NonNegativeInt = 0  # pixels per side; 0 = own (a folder: median short side rounded to 32, 32-224)
    val_fraction: Share = 0.1  # validation (the kNN queries while training): this share of the training images
    test_fraction: Share = 0.2  # test share of a labelled folder without val/ or test/ inside (hash-chosen)
    # zoo-net w48 (simclr's default) beat zoo-resnet w32 (byol's) on validation kNN
    # (docs/LOG.md#2026-12-01-simclr-zoo-net-w48)
    model: str = "zoo-net"  # backbone: zoo-net, zoo-resnet, or a timm name (3x3 stem, no max-pool under 64 px)
    width: Count = 48  # zoo-net / zoo-resnet channels of the first group (x2, x4 in the next two)
    # a fine-tune keeps the source's backbone (model, width), whitening and input statistics; the heads start afresh
    weights: str = ""  # a vision or contrastive run folder to start from; '' = from scratch
    # backbone_lr tried at 1, 0.1 and 0.03 on a fine-tune from a vision run
    # (docs/LOG.md#2026-12-04-contrastive-backbone-lr)
    backbone_lr: AutoUnit = -1.0  # a fine-tune's backbone LR as a fraction of lr (new heads get lr); -1 = 0.1
    proj_hidden: NonNegativeInt = 0  # projection MLP hidden width; 0 = 2048 (SimCLR) / 4096 (BYOL)
    proj_dim: NonNegativeInt = 0  # projection output width; 0 = 128 (SimCLR) / 256 (BYOL)
    temperature: Positive = 0.2  # NT-Xent temperature (SimCLR)
    pred_lr: Positive = 10.0  # BYOL predictor LR as a multiple of lr (a fast predictor keeps the target worth chasing)
    momentum_base: Fraction = 0.99  # BYOL target EMA momentum at the start, raised to 1 by a cosine over the budget
    optimizer: Literal["adamw", "lars"] = "adamw"  # adamw | lars (SGD with layer-wise trust ratios, large batches)
    lr: NonNegative = 0.0  # peak LR; 0 = adamw 2e-3, lars 0.3 x batch/256 (SimCLR's rule)
    weight_decay: Auto = -1.0  # on weights only; -1 = adamw 0.05, lars 1e-6
    # batch_size 128 was the pilot's pick, read off kNN accuracy on the test queries (protocol 1, before this recipe
    # had a validation split); kept as it was until it is re-measured on validation.
    batch_size: Annotated[int, Range(2)] = 128  # images per batch (two views each): 2 x 128 - 2 negatives per view
    schedule: Literal["cosine", "wsd", "linear", "constant"] = "cosine"  # LR shape over budget progress
    warmup: Unit = 0.1  # fraction of the budget spent warming up
    crop_min: AutoUnit = -1.0  # random resized crop: smallest area kept; -1 = 0.2 (0.5 under 16 px)
    view_size: Annotated[int, Range(-1)] = -1  # training views' side: -1 = 3/4 of the images' (SimCLR, 16+ px); 0 = own
    flip: Literal["auto", "on", "off"] = "auto"  # horizontal flips; auto = on, except digits
    color: Jitter = 0.4  # colour jitter strength (brightness, contrast, saturation; hue = color/4), p 0.8; 0 = off
    grayscale: Unit = 0.2  # probability of a grey view (colour images)
    blur: AutoUnit = -1.0  # Gaussian blur probability; -1 = 0.5 above 32 px, off at 32 px and below (SimCLR on CIFAR)
    knn_k: Count = 200  # neighbours voting in the kNN evaluation
    knn_temperature: Positive = 0.1  # vote weight exp(cosine / T)
    probe_c: Positive = 1.0  # linear probe: inverse L2 strength of the logistic regression
    channels_last: bool = True  # NHWC memory format for convolutions
    eval_every: Unit = 0.25  # fraction of the budget between kNN evaluations (validation queries)


METHOD_DEFAULTS = {"simclr": {"proj_hidden": 2048, "proj_dim": 128},
                   "byol": {"proj_hidden": 4096, "proj_dim": 256}}
DEFAULT_LR = {"adamw": 2e-3, "lars": 0.3}
DEFAULT_WD = {"adamw": 0.05, "lars": 1e-6}


def check_config(cfg: ContrastiveConfig) -> None:
    """Values that would fail late (or silently) are refused before any data loads."""
    if cfg.temperature <= 0 or cfg.knn_temperature <= 0:
        key = "temperature" if cfg.temperature <= 0 else "knn_temperature"
        raise ZooError(f"{key}={getattr(cfg, key)}: must be positive")
    if cfg.knn_k < 1:
        raise ZooError(f"knn_k={cfg.knn_k}: must be at least 1")
    if not 0 <= cfg.momentum_base < 1:
        raise ZooError(f"momentum_base={cfg.momentum_base}: must be in [0, 1)")
    if cfg.crop_min != -1 and not 0 < cfg.crop_min <= 1:
        raise ZooError(f"crop_min={cfg.crop_min}: must be in (0, 1] (or -1 for the default)")
    for key in ("grayscale", "blur"):
        value = getattr(cfg, key)
        if not 0 <= value <= 1 and not (key == "blur" and value == -1):
            raise ZooError(f"{key}={value}: a probability in [0, 1]")
    if cfg.batch_size < 2:
        raise ZooError(f"batch_size={cfg.batch_size}: contrastive learning needs at least 2 images per batch")


# =============================================================================================
# Losses
# =============================================================================================

def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCLR's normalised-temperature cross-entropy: each of the 2N views must pick its partner out
    of the other 2N - 1 by cosine similarity / temperature; mean over the 2N views. The similarities are fp32
    under a bf16 autocast too (autocast would run the matmul in bf16: 8 bits of mantissa, where T = 0.2 magnifies
    a similarity's rounding fivefold); a (2N)^2 matrix of N-dim features costs nothing beside the backbone."""
    n = len(z1)
    with torch.autocast(z1.device.type, enabled=False):
        z = F.normalize(torch.cat((z1, z2)).float(), dim=1)
        logits = z @ z.T / temperature
    logits.fill_diagonal_(float("-inf"))  # a view is not its own candidate
    partner = torch.cat((torch.arange(n, 2 * n), torch.arange(n))).to(z.device)
    return F.cross_entropy(logits, partner)


def byol_loss(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """2 - 2 cos(prediction, target projection), mean over the batch (0 when aligned, 4 when opposite)."""
    return (2 - 2 * F.cosine_similarity(p.float(), z.float(), dim=-1)).mean()


def view_loss(method: str, augment: nn.Module, standardize, temperature: float, device):
    """The loss of a batch (uint8 images, the seed of their augmentation): two augmented views of each image, then
    NT-Xent of their projections (SimCLR), or each view's prediction against the target's projection of the other
    (BYOL, symmetrised)."""

    def loss_fn(model: SSLModel, batch) -> torch.Tensor:
        x, seed = batch
        v1, v2 = (standardize(v) for v in two_views(augment, x.to(device, non_blocking=True).float().div_(255), seed))
        if method == "simclr":
            return nt_xent(model(v1), model(v2), temperature)
        p1, p2 = (model(v, predict=True) for v in (v1, v2))
        target = unwrap(model).target  # no gradients: outside DDP's view
        with torch.no_grad():
            z1, z2 = target(v1), target(v2)
        return 0.5 * (byol_loss(p1, z2) + byol_loss(p2, z1))

    return loss_fn


# =============================================================================================
# Optimizer
# =============================================================================================

def build_optimizer(cfg: ContrastiveConfig, model: SSLModel, fine_tune: bool = False) -> torch.optim.Optimizer:
    """Weight decay on weights only (LARS: the trust ratio too, as in SimCLR); the target gets no updates. A
    fine-tune's backbone (``fine_tune``) trains at ``backbone_lr`` x lr, its new projector (and predictor) as from
    scratch."""
    wd = cfg.weight_decay if cfg.weight_decay >= 0 else DEFAULT_WD[cfg.optimizer]
    lr = cfg.lr or (DEFAULT_LR["adamw"] if cfg.optimizer == "adamw"
                    else DEFAULT_LR["lars"] * cfg.batch_size * cfg.accum_steps / 256)
    scale = {id(p): (cfg.backbone_lr if cfg.backbone_lr >= 0 else 0.1) for p in model.backbone.parameters()} \
        if fine_tune else {}
    if model.predictor is not None:
        scale |= {id(p): cfg.pred_lr for p in model.predictor.parameters()}
    groups = []
    for g in optim.decay_groups(model, wd):
        for s in sorted({scale.get(id(p), 1.0) for p in g["params"]}):
            params = [p for p in g["params"] if scale.get(id(p), 1.0) == s]
            groups.append({**g, "params": params, "lr": lr * s})
    optim.assert_covers(model, [g["params"] for g in groups])
    if cfg.optimizer == "adamw":
        return optim.adamw(groups, lr)
    from timm.optim import Lars

    return Lars(groups, lr=lr, momentum=0.9)


# =============================================================================================
# Predict: images to embeddings; with no data, the run's test split embedded and scored again
# =============================================================================================

@dataclass
class EmbedOptions(artifact.PredictOptions):
    normalize: bool = False  # unit-length embeddings (what the kNN compares); false = the backbone's features


def embed(cfg: ContrastiveConfig, opts: EmbedOptions, run) -> artifact.Predictions:
    """``data=`` images (a folder, read recursively, or a file) -> (N, dim) float32 ``embeddings.npy`` in the folder
    beside the CSV, the CSV its index (file, row). No data: the run's test queries (rows as its predictions.csv,
    embeddings as its embeddings.npy) and its test metrics, recomputed against the training images' bank as the run
    scored them."""
    pre, device = run.card["preprocess"], choose_device(run.device)
    if opts.data:  # the files first: a wrong path or channel count fails before the model loads
        files, _, root = list_images(opts.data, log=run.log)
        x = read_images(files, pre["image_size"], pre["channels"], run.log, run.progress)
    else:
        splits = eval_splits(cfg, run)
    backbone = load_backbone(run.card, run.path("model.safetensors"), device)
    memory_format = torch.channels_last if run.card["architecture"]["channels_last"] else torch.contiguous_format
    scale, _ = normalizer(torch.tensor(pre["mean"]), torch.tensor(pre["std"]), device, memory_format)
    features = functools.partial(extract_features, backbone, normalize=scale, batch=opts.batch_size or 512,
                                 progress=run.progress)
    metrics_out = {}
    with autocast(device, resolve_precision(device, cfg.precision)):  # the run's evaluation precision
        if opts.data:
            queries = features(x)
            rows = [{"file": name, "row": i} for i, name in enumerate(item_names(files, root))]
        else:
            bank, queries = features(splits.train_x), features(splits.test_x)
            metrics_out = score_features(bank, queries, splits, cfg, "test")
            rows = knn_rows(bank, queries, splits, cfg)
    if opts.normalize:
        queries = F.normalize(queries, dim=1)
    path = run.files_dir / "embeddings.npy"
    np.save(path, queries.numpy())
    return artifact.Predictions(rows=rows, metrics=metrics_out, files=[path], arrays={"embeddings": queries.numpy()})


# =============================================================================================
# Training
# =============================================================================================

SOURCES = ("vision/resnet", "vision/finetune", "contrastive/simclr", "contrastive/byol")


def start_from(cfg: ContrastiveConfig, variant: dict) -> tuple[ContrastiveConfig, finetune.Source | None]:
    """A fine-tune's source run (``weights=``) and the config with the source's backbone (model, width) taken
    from its card; a model or width set off the variant's defaults (``variant``) to another value is refused."""
    if not cfg.weights:
        return cfg, None
    source = finetune.read_source(cfg.weights, SOURCES)
    arch = source.card.get("architecture", {})
    return finetune.inherit(cfg, source, {"model": arch["model"], "width": arch["width"]}, "backbone", variant), source


def source_stats(source: finetune.Source, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The source's input statistics (its card's), for images of as many channels."""
    pre = source.card["preprocess"]
    if pre["channels"] != channels:
        raise ZooError(f"weights={source.folder}: trained on {pre['channels']}-channel images, these have {channels}")
    return torch.tensor(pre["mean"]).flatten(), torch.tensor(pre["std"]).flatten()


def _report_setup(cfg: ContrastiveConfig, data: SSLData, backbone: nn.Module, dim: int, run) -> None:
    """What the run pretrains on and how it is scored, in the log and the summary."""
    splits, channels, size = data.eval, data.pretrain_x.shape[1], data.pretrain_x.shape[-1]
    run.log(f"{data.eval.name}: {len(data.pretrain_x)} images to pretrain on {tuple(data.pretrain_x.shape[1:])}; "
            f"evaluation: a bank of {len(splits.train_y)} labelled images, {len(splits.val_y)} validation / "
            f"{len(splits.test_y)} test queries, {len(splits.classes)} classes; {cfg.model} backbone "
            f"{sum(p.numel() for p in backbone.parameters()) / 1e6:.2f}M params, {dim} features")
    run.report("augment", describe_augment(cfg, channels, cfg.view_size, image_size=size))
    run.report("evaluation", f"kNN k={cfg.knn_k} T={cfg.knn_temperature:g} (cosine) and a logistic-regression probe "
                             f"on standardised frozen features: {len(splits.train_y)} labelled / {len(splits.val_y)} "
                             f"validation / {len(splits.test_y)} test images")


def keep_start(run, trained: nn.Module, metrics: dict, start: dict, begun: dict | None,
               bank: dict) -> tuple[str, dict]:
    """A fine-tune's start (``begun``, scored as ``start``) is a candidate, chosen on validation: contrastive training
    can undo what a supervised source learnt. When it is better, ``trained`` gets it back: ("start", its validation
    figures, the fine-tuned ones as ``..._tuned``); else ("", ``metrics``)."""
    final_val, scores = metrics.get("val_knn_accuracy", float("-inf")), dict(metrics)
    if begun is None or start["val_knn_accuracy_start"] <= final_val:
        return "", scores
    trained.load_state_dict(begun)
    bank.pop("last", None)  # the bank is the fine-tuned backbone's
    scores |= {f"{k}_tuned": v for k, v in scores.items() if k.startswith("val_")}
    scores |= {k.removesuffix("_start"): v for k, v in start.items()}
    run.report("selected", f"the source's backbone: validation kNN {start['val_knn_accuracy_start']:.4f} before the "
                           f"first step, {final_val:.4f} after fine-tuning")
    return "start", scores


# precision=auto on a CPU with bf16 units: bf16 for simclr and byol (faster, validation no worse:
# docs/LOG.md#2026-12-03-cpu-precision-simclr, docs/LOG.md#2026-12-04-cpu-precision-esm-finetune-dmpnn-byol)
@recipe("contrastive/simclr", config=ContrastiveConfig, benchmark="cifar10-subset", metric="test_knn_accuracy",
        budget="60s", predict=embed, predict_options=EmbedOptions, exports={"timm": export_timm},
        summary="SimCLR: two augmented views (3/4 of the image side), NT-Xent (T 0.2), MLP head discarded; kNN + probe",
        cpu_precision="bf16")
@recipe("contrastive/byol", config=ContrastiveConfig, benchmark="cifar10-subset", metric="test_knn_accuracy",
        budget="60s", predict=embed, predict_options=EmbedOptions, exports={"timm": export_timm},
        summary="BYOL: online predictor chases an EMA target (0.99 to 1, cosine), no negatives; kNN + probe",
        defaults={"method": "byol", "model": "zoo-resnet", "width": 32}, cpu_precision="bf16")
def train(cfg: ContrastiveConfig, run) -> dict[str, float]:
    method = cfg.method
    cfg = dataclasses.replace(cfg, **{k: v for k, v in METHOD_DEFAULTS[method].items() if not getattr(cfg, k)})
    check_config(cfg)
    cfg, source = start_from(cfg, getattr(run.spec, "defaults", {}))
    device = choose_device(run.device)
    speed_switches(device, tf32=cfg.tf32)
    data = load_data(cfg, run)
    cfg = resolve_auto(cfg, data)
    channels, size = data.pretrain_x.shape[1], data.pretrain_x.shape[-1]
    splits = data.eval
    if splits.train_x.shape[-1] != size:
        resize_splits(splits, size)
    run.record_split({**splits.keys, **({"pretrain": data.pretrain_keys} if cfg.eval_data else {})})
    run.report("split", splits.how + (f"; pretraining on {len(data.pretrain_x)} unlabelled images of {cfg.data}"
                                      if cfg.eval_data else "; pretraining on the train part, without labels"))
    if source is not None:  # scored on images the source never trained on
        finetune.check_unseen(source, splits.keys["test"], "images")
    # labels are for evaluation only; leakage: the validation queries found among the pretraining images
    run.inspect(train=(data.pretrain_x,), val=(splits.val_x,), task="unlabelled", fine_tune=source is not None)
    backbone, dim = build_backbone(cfg, channels, size)
    check_views(backbone, channels, cfg.view_size, cfg.model)
    projector = mlp(dim, cfg.proj_hidden, cfg.proj_dim)
    predictor = mlp(cfg.proj_dim, cfg.proj_hidden, cfg.proj_dim) if method == "byol" else None
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model = SSLModel(backbone, projector, predictor).to(device=device, memory_format=memory_format)
    augment = build_augment(cfg, channels, cfg.view_size).to(device)
    # per-channel statistics of the pretraining images (the rule for from-scratch models); a fine-tune keeps its
    # source's, which its backbone's first layer was trained on
    mean, std = backbones.input_stats(data.pretrain_x) if source is None else source_stats(source, channels)
    _report_setup(cfg, data, backbone, dim, run)

    normalize, standardize = normalizer(mean, std, device, memory_format)

    if isinstance(backbone, backbones.ZooNet) and source is None:  # a source's whitening filters are kept
        backbone.init_whitening(normalize(data.pretrain_x[:5000]))
        if model.target is not None:
            model.target[0].whiten.load_state_dict(backbone.whiten.state_dict())

    def draw_seed(batch, g):  # the augmentation seed is a function of the batch's position (exact resume)
        (x,) = batch
        return x, int(torch.randint(0, 2**62, (1,), generator=g))

    loss_fn = view_loss(method, augment, standardize, cfg.temperature, device)
    on_step = None
    if method == "byol":
        def on_step(progress: float, step: int) -> None:  # runs before each step: after the previous update
            if step > 0:
                update_target(model, byol_momentum(cfg.momentum_base, progress))

    batches = TensorBatches((data.pretrain_x,), cfg.batch_size, seed=run.seed, transform=draw_seed)
    optimizer = build_optimizer(cfg, model, fine_tune=source is not None)
    lr_schedule = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup)
    bank = {}

    def evaluate(m: SSLModel) -> dict[str, float]:  # kNN of the validation queries while training
        bank["last"] = extract_features(m.backbone, splits.train_x, normalize)
        return score_features(bank["last"], extract_features(m.backbone, splits.val_x, normalize), splits, cfg, "val")

    start, begun = {}, None
    if source is not None:  # the source's backbone on this run's validation queries, before the first step
        start = {f"{k}_start": v for k, v in finetune.score_start(
            model, evaluate, device, resolve_precision(device, cfg.precision)).items()}
        run.log(f"start ({source.folder.name}): validation kNN accuracy {start['val_knn_accuracy_start']:.4f}")
        begun = {k: v.detach().clone() for k, v in model.backbone.state_dict().items()}
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr_schedule),
                 settings=LoopSettings.of(cfg), on_step=on_step)
    trained = result.eval_model.backbone
    selected, scores = keep_start(run, trained, result.metrics, start, begun, bank)
    selected = selected or ("ema" if cfg.ema_decay > 0 else "final")
    # The test queries, once, on the selected backbone, embedded as fit embeds (the run's precision); fit's last
    # evaluation, at the end of the budget, embedded the bank already (a resumed run may have to embed it again).
    with autocast(device, resolve_precision(device, cfg.precision)):
        features = bank["last"] if "last" in bank else extract_features(trained, splits.train_x, normalize)
        queries = extract_features(trained, splits.test_x, normalize)
        final = score_features(features, queries, splits, cfg, "test")
    run.log(f"frozen features on test: kNN accuracy {final['test_knn_accuracy']:.4f}, "
            f"linear probe {final['test_linear_accuracy']:.4f}")
    export_safetensors(result.eval_model.backbone, run.dir / "model.safetensors",
                       metadata={"recipe": run.spec.name, "model": cfg.model, "width": str(cfg.width)})
    # what predict needs (the scaling, the architecture) and what it must reproduce (the test queries' embeddings)
    artifact.write_card(run.dir, recipe=run.spec.name, task="embedding", weights=["model.safetensors"],
                        selected=selected, classes=splits.classes,
                        architecture={"model": cfg.model, "width": cfg.width, "feature_dim": dim,
                                      "channels_last": cfg.channels_last},
                        preprocess={"image_size": size, "channels": channels, "mean": mean.tolist(),
                                    "std": std.tolist(), "resize": "centre square, bilinear (antialiased)",
                                    "scale": "x / 255, then (x - mean) / std per channel"},
                        evaluation={"knn_k": cfg.knn_k, "knn_temperature": cfg.knn_temperature, "probe_c": cfg.probe_c,
                                    "bank": f"the {len(splits.train_y)} training images of {splits.name}"},
                        **({"source": finetune.provenance(source)} if source is not None else {}))
    artifact.write_predictions(run.dir, knn_rows(features, queries, splits, cfg))
    if distributed.is_main():
        np.save(run.dir / "embeddings.npy", queries.numpy())
    return {**result.stats(), **scores, **final, **start, "feature_dim": dim}

