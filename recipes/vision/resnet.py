"""Vision: image classification from scratch (``vision/resnet``) and two-stage transfer (``vision/finetune``).

Reads top to bottom: config, optimizer and schedule (with the fine-tuning stages), evaluation, training.
Images live in memory as uint8 tensors and are augmented in batches, so data loading never starves
the 2-core CPU runs the leaderboard is measured on. The datasets and backbones are shared with the other
image domains (``recipe_zoo.recipes.images``, ``recipe_zoo.recipes.backbones``); vision's augmentation is in
``recipe_zoo.recipes.vision.data``.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import artifact, datasets, finetune, optim, schedule, streams
from recipe_zoo.core.artifact import PredictOptions
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.diagnose import relative_weight_change, snapshot
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import Auto, Count, Fraction, NonNegative, NonNegativeInt, Range, Share, Unit, recipe
from recipe_zoo.recipes import backbones, image_files, image_streams, image_tables, images
from recipe_zoo.recipes import image_datasets as _image_datasets  # noqa: F401  (declares the image datasets)
from recipe_zoo.recipes.vision.data import augment, mix, prediction_rows, prepare_images, resolve_auto, test_names
from recipe_zoo.recipes.vision.evaluation import evaluate, predict, score_test, scores
from recipe_zoo.recipes.vision.models import export_onnx, export_timm, layer_groups, load_model, save_model

# =============================================================================================
# Config
# =============================================================================================

AutoInt = Annotated[int, Range(-1)]
Decay = Annotated[float, Range(0, 1, low_open=True)]  # a multiplier per step that shrinks (1 = off)


@dataclass
class VisionConfig(LoopSettings):
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("val_fraction", "test_fraction", "labels", "file_column", "label_column")
    CHOSEN_ON_TEST: ClassVar[str] = "the tuned defaults, ported when vision had only train and test"

    data: str = "digits"  # dataset name (zoo data list), or a folder of class subfolders or with a labels.csv
    labels: str = ""  # a folder's labels table (CSV, TSV, parquet; paths relative to it): '' = its labels.csv if any
    file_column: str = ""  # the labels table's file column ('' = file, filename, image, image_id, path, ...)
    label_column: str = ""  # the labels table's label column ('' = label, class, category, target, y)
    image_size: NonNegativeInt = 0  # px per side; 0 = own (folder: median short side to x32, 32-224; finetune: model)
    val_fraction: Share = 0.1  # validation: this share of the training images, chosen by a hash of each image
    test_fraction: Share = 0.2  # test share of a folder without val/ or test/ inside (hash-chosen)
    model: str = "zoo-net"  # zoo-net (whitened stem + 3 conv groups, sized for CPU budgets), zoo-resnet, or a timm name
    width: Count = 48  # zoo-net / zoo-resnet channels of the first group (x2, x4 in the next two)
    weights: str = ""  # pretrained weights: a file or folder, 'hub' for the timm hub, '' for none
    optimizer: Literal["sgd", "adamw", "muon"] = "sgd"  # sgd (Nesterov) | adamw | muon (filters; AdamW elsewhere)
    lr: NonNegative = 0.0  # peak LR; 0 = the optimizer's default: sgd 0.375 x sqrt(batch/256), adamw 1e-3, muon 0.02
    momentum: Fraction = 0.85  # SGD Nesterov momentum
    norm_lr_scale: Auto = -1.0  # LR x this for BatchNorm shifts; -1 = 64 for zoo-net under SGD, else 1
    weight_decay: Auto = -1.0  # on weights only, never biases/norms; -1 = sgd 1.3e-3, adamw 0.05, muon 0.1
    batch_size: Count = 256  # images per micro-batch
    schedule: Literal["cosine", "wsd", "linear", "constant"] = "linear"  # LR shape over budget progress
    warmup: Unit = 0.23  # fraction of the budget spent warming up
    warmup_start: Unit = 0.2  # LR multiplier the warmup starts from (0.2 + linear decay = a one-cycle)
    lr_final: NonNegative = 0.07  # LR multiplier at the end of the budget
    label_smoothing: Fraction = 0.2  # cross-entropy label smoothing
    crop_pad: AutoInt = -1  # random translation by up to this many pixels (reflect padding); 0 = off, -1 = size/8
    flip: Literal["auto", "on", "off"] = "auto"  # horizontal flips + flip TTA; auto = on, except digits
    randaugment: NonNegativeInt = 0  # RandAugment ops per image (0 = off); slow on CPU for large images
    mixup: NonNegative = 0.0  # MixUp alpha (0 = off)
    cutmix: NonNegative = 0.0  # CutMix alpha (0 = off)
    tta: Annotated[int, Range(0, 2)] = 2  # test-time views: 0 none, 1 + mirror image (if flipping), 2 + 1-pixel shifts
    channels_last: bool = True  # NHWC memory format for convolutions
    head_fraction: Unit = 0.0  # finetune stage 1: fraction of the budget training only the new head
    finetune_lr_ratio: NonNegative = 0.1  # finetune stage 2: backbone LR as a fraction of lr
    unfreeze_top: NonNegativeInt = 0  # finetune stage 2: train only the last N layer groups of the backbone (0 = all)
    layer_decay: Decay = 1.0  # layer-wise LR decay per layer group towards the input (1 = off; 0.65 typical)
    freeze_bn: bool = False  # keep pretrained BatchNorm statistics fixed while fine-tuning
    ema_decay: Fraction = 0.0  # EMA of weights used for evaluation (0 = off)
    lookahead: Fraction = 0.95  # every 5 steps pull the weights to their EMA, decay this^5 x progress^3 (0 = off)
    eval_every: Unit = 0.1  # fraction of the budget between validation evaluations (each costs TTA passes)
    stream: bool = False  # read images from disk as they are used (folders; prepared folders always): flat memory
    workers: AutoInt = -1  # processes reading streamed images ahead of training; -1 = one per core, up to 4


# =============================================================================================
# Optimizer and schedule
# =============================================================================================

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
    lr_decay = optim.layer_decay(depth, cfg.layer_decay)  # per parameter name, 1 at the top group
    auto_scale = 64.0 if cfg.model == "zoo-net" and cfg.optimizer == "sgd" else 1.0  # airbench's SGD setting
    norm_scale = cfg.norm_lr_scale if cfg.norm_lr_scale > 0 else auto_scale
    norm_shifts = {id(m.bias) for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
    groups: dict[tuple, list] = {}
    for name, p in model.named_parameters():
        is_head = name.startswith(head + ".")
        scale = 1.0 if is_head or not finetuning else cfg.finetune_lr_ratio
        scale *= lr_decay[name] if lr_decay and not is_head else 1.0
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
# The trained model: saved for use, and applied to new images (zoo predict)
# =============================================================================================

@dataclass
class VisionPredictOptions(PredictOptions):
    tta: Annotated[int, Range(-1, 2)] = -1  # test-time views (0 none, 1 + mirror, 2 + shifts); -1 = as the run


@torch.no_grad()
def predict_images(cfg: VisionConfig, opts: VisionPredictOptions, run) -> artifact.Predictions:
    """Class probabilities for a folder (flat, or class subfolders: then scored too) or one image; no data: the
    run's own test split, rebuilt from its config and scored as the run scored it."""
    card, device = run.card, choose_device(run.device)
    pre, classes = card["preprocess"], card["classes"]
    if opts.data:
        files, labels, root = image_files.list_images(opts.data, classes, run.log)
        x = image_files.read_images(files, pre["image_size"], pre["channels"], run.log, run.progress)
        names, y = image_files.item_names(files, root), torch.tensor(labels) if labels else None
    else:
        data = images.load_image_splits(cfg.data, cfg.image_size, cfg.val_fraction, cfg.test_fraction, run,
                                        labels=image_tables.labels_table(cfg))
        if data.test_x.shape[-1] != pre["image_size"]:  # a pretrained model's own resolution
            images.resize_splits(data, pre["image_size"])
        x = streams.mapped(data.test_x, lambda b: b.expand(-1, pre["channels"], -1, -1),
                           (pre["channels"], *data.test_x.shape[2:]))
        y, names = data.test_y, test_names(data)
    model = load_model(card, run.dir, device)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    mean, std = (torch.tensor(pre[k]).view(1, -1, 1, 1).to(device) for k in ("mean", "std"))

    def normalize(x_uint8: torch.Tensor) -> torch.Tensor:
        x = x_uint8.to(device, non_blocking=True).float().div_(255)
        return ((x - mean) / std).contiguous(memory_format=memory_format)

    tta = card["evaluation"]["tta"] if opts.tta < 0 else opts.tta
    with autocast(device, resolve_precision(device, cfg.precision)):
        logits = predict(model, x, normalize, tta, card["evaluation"]["flip"], opts.batch_size,
                         progress=lambda done: run.progress(done, len(x), "images"),
                         workers=image_streams.default_workers(cfg.workers) if streams.is_lazy(x) else 0)
        # the run's own test split: its test_ metrics again; a labelled folder: plain names (another data set)
        test = scores(logits, y, len(classes), prefix="" if opts.data else "test_") if y is not None else {}
    return artifact.Predictions(rows=prediction_rows(logits, names, classes, y), metrics=test,
                                arrays={"probabilities": logits.float().softmax(1).cpu().numpy()})


# =============================================================================================
# Training
# =============================================================================================

USE = dict(predict=predict_images, predict_options=VisionPredictOptions,
           exports={"onnx": export_onnx, "timm": export_timm}, hooks={"prepare": prepare_images})


# precision=auto on a CPU with bf16 units: bf16 (faster, validation better:
# docs/LOG.md#2026-12-03-cpu-precision-vision-resnet)
@recipe("vision/resnet", config=VisionConfig, benchmark="cifar10-subset", metric="test_accuracy", budget="60s",
        summary="image classification from scratch: compact ResNet (or any timm model), SGD-Nesterov, TTA",
        cpu_precision="bf16", **USE)
@recipe("vision/finetune", config=VisionConfig, benchmark="cifar10-subset", metric="test_accuracy", budget="60s",
        summary="two-stage transfer: train the new head on a frozen backbone, then unfreeze at 10x lower LR",
        defaults={"model": "resnet18", "optimizer": "adamw", "head_fraction": 0.2}, **USE)
def train(cfg: VisionConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device, tf32=cfg.tf32)
    if cfg.head_fraction > 0 and not cfg.weights:
        raise ZooError("two-stage fine-tuning (head_fraction > 0) needs pretrained weights: weights=PATH "
                       "(file or folder) or weights=hub")
    data = images.load_image_splits(cfg.data, cfg.image_size, cfg.val_fraction, cfg.test_fraction, run,
                                    stream=cfg.stream, labels=image_tables.labels_table(cfg))
    run.record_split(data.keys)
    run.report("split", data.how)
    cfg = resolve_auto(cfg, data)
    lazy = streams.is_lazy(data.train_x)  # streamed: read as used, ahead of training by `workers` processes
    workers = image_streams.default_workers(cfg.workers) if lazy else 0
    pretrained_timm = bool(cfg.weights) and cfg.model not in backbones.OWN_MODELS
    source_rgb = backbones.source_channels(cfg.model, cfg.weights) == 3  # a zoo-net / zoo-resnet run on RGB images
    if (pretrained_timm or source_rgb) and data.train_x.shape[1] == 1:  # grey images into an RGB-pretrained stem
        data.train_x, data.val_x, data.test_x = (
            streams.mapped(t, lambda b: b.expand(-1, 3, -1, -1), (3, *t.shape[2:]))
            for t in (data.train_x, data.val_x, data.test_x))
        if source_rgb:  # zoo-net's whitening stem has as many filters as channels allow: the source's is kept
            run.log(f"weights={cfg.weights}: the source was trained on RGB images; these grey images are given to "
                    "its stem in all three channels")
    num_classes, in_channels = len(data.classes), data.train_x.shape[1]
    # a zoo run of these very classes (names and order) keeps its head: its start is the source's model, scored on
    # validation before the first step (on the source's own data, its val_accuracy); other classes get a new head
    keep_head = cfg.model in backbones.OWN_MODELS and backbones.source_classes(cfg.weights) == list(data.classes)
    model, head = backbones.build_model(cfg.model, cfg.width, cfg.weights, in_channels, num_classes,
                                        data.train_x.shape[-1], keep_head)
    if cfg.weights:
        run.log(f"weights={cfg.weights}: " + ("the source's head kept (the same classes)" if keep_head else
                                              f"a new head for these {num_classes} classes"))
    if pretrained_timm and not cfg.image_size:
        size = model.pretrained_cfg["input_size"][-1]  # the pretrained model's resolution
        images.resize_splits(data, size)
        if not datasets.is_dataset(cfg.data):  # an own folder: the summary records the size it trains at
            run.report("image_size", size)
    if run.inspecting:  # zoo doctor reads a sample of streamed images
        run.inspect(train=image_streams.stats_sample(data.train_x, data.train_y),
                    val=image_streams.stats_sample(data.val_x, data.val_y),
                    task="classification", num_classes=num_classes, fine_tune=(head + ".",) if cfg.weights else False)
    mean, std = (t.view(1, -1, 1, 1).to(device)
                 for t in backbones.input_stats(data.train_x, model, cfg.model, cfg.weights))
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=memory_format)
    run.log(f"{data.name}: {data.sizes()}, {num_classes} classes, "
            f"{tuple(data.train_x.shape[1:])}; {cfg.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params")

    def normalize(x_uint8: torch.Tensor) -> torch.Tensor:
        x = x_uint8.to(device, non_blocking=True).float().div_(255)
        return ((x - mean) / std).contiguous(memory_format=memory_format)

    if hasattr(model, "init_whitening") and not cfg.weights:  # the pixels of 5,000 32 px images, at most
        model.init_whitening(normalize(data.train_x[:max(1, min(5000, 5000 * 32 * 32 // data.train_x.shape[-1] ** 2))]))

    def loss_fn(model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        x, y = normalize(x), y.to(device, non_blocking=True)
        if cfg.mixup or cfg.cutmix:
            x, y = mix(x, y, num_classes, cfg)
        return F.cross_entropy(model(x), y, label_smoothing=cfg.label_smoothing)

    batches = TensorBatches((data.train_x, data.train_y), cfg.batch_size, seed=run.seed,
                            transform=functools.partial(augment, cfg=cfg), workers=workers, device=device)
    optimizer = build_optimizer(cfg, model, head)
    lr_schedule = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup, final=cfg.lr_final, start=cfg.warmup_start)
    update = functools.partial(schedule.apply_schedules, lr=lr_schedule,
                               momentum=schedule.muon_momentum if cfg.optimizer == "muon" else None)
    hooks, initial = [], None
    if cfg.weights:
        hooks.append(stage_hook(cfg, model, head))
        initial = snapshot(model)
    elif isinstance(model, backbones.ZooNet):  # the whitening stem's bias settles early, then stays (airbench)
        hooks.append(lambda progress, step: model.whiten.bias.requires_grad_(progress < 0.3))
    on_step = (lambda progress, step: [hook(progress, step) for hook in hooks]) if hooks else None

    def validate(m: nn.Module) -> dict:
        return evaluate(m, data.val_x, data.val_y, normalize, cfg.tta, cfg.flip == "on", num_classes, workers=workers)

    start = {}
    if keep_head:
        score = finetune.score_start(model, validate, device, resolve_precision(device, cfg.precision))
        start = {"val_accuracy_start": score["val_accuracy"]}
        run.log(f"validation accuracy before fine-tuning (the source's model): {start['val_accuracy_start']:.6f}")
    settings = LoopSettings.of(cfg)
    if settings.compile and device.type == "cpu" and resolve_precision(device, cfg.precision) == "bf16":
        # torch 2.14's inductor on a CPU: the compiled zoo-net's backward under a bf16 autocast gives NaN gradients
        # (the forward matches eager; `zoo run vision/resnet compile=true` diverged at step 2, fp32 compiled trains)
        run.log("compile=true with bf16 on a CPU: training eager (the compiled backward gives NaN gradients here)")
        settings = dataclasses.replace(settings, compile=False)
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=validate,
                 update_hparams=update, settings=settings, on_step=on_step)
    if initial is not None:
        _report_weight_change(model, initial, head, run)
    test, rows = score_test(result.eval_model, data, normalize, cfg, device, workers)  # once, after training
    save_model(run, cfg, result.eval_model, head, data, mean, std, rows)
    return {**result.stats(), **result.metrics, **test, **start}


def _report_weight_change(model: nn.Module, initial: dict, head: str, run) -> None:
    change = relative_weight_change(model, initial)
    worst = sorted(change.items(), key=lambda kv: -kv[1])[:5]
    run.log("largest relative weight change: " + ", ".join(f"{n} {v:.1%}" for n, v in worst))
    over = [n for n, v in change.items() if v > 0.10 and not n.startswith(head + ".")]
    if over:
        run.log(f"warning: {len(over)} backbone tensors moved more than 10% (e.g. {over[0]}): the fine-tuning LR "
                "is probably too high for transfer; try finetune_lr_ratio=0.03 or layer_decay=0.65")
