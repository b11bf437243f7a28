"""``zoo plan``: which recipe for this data, and what a model of N parameters costs to train.

``--data PATH`` / ``--kind K --rows N``: the architecture table by data type and size (RECIPE-FACTS), mapped
to the zoo's recipes with a starting config and the reason. ``--params 125M`` / ``--recipe llm/gpt
depth=12``: Chinchilla (20 tokens per parameter) and inference-optimal (100-200) token counts, training
FLOPs 6·N·D, memory (18-20 bytes per parameter for bf16 Adam training, plus activations) and the time at
the share of peak the device profiles (``core.devices``) say a transformer reaches, or a stated MFU, on this
machine (measured peak) and on named GPUs (datasheet peaks). ``--recipe NAME --budget B``: what the recipe's own
sizing hook would choose on a device (shape, batch, steps, predicted throughput), through the registry.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from recipe_zoo.core.api import SimpleRun
from recipe_zoo.core.errors import ZooError

KINDS = ("image", "text", "tabular", "audio", "molecules", "protein", "medical")
TOKENS_PER_PARAM = 20.0  # Chinchilla, compute-optimal
INFERENCE_TOKENS_PER_PARAM = (100.0, 200.0)
TRAIN_BYTES_PER_PARAM = (18.0, 20.0)  # bf16 weights + fp32 master + Adam moments + gradients
DEFAULT_GPUS = ("H100", "A100", "RTX 4090")

IMAGE_EXT = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
AUDIO_EXT = {".wav", ".flac", ".mp3", ".ogg", ".m4a"}
AMINO = set("ACDEFGHIKLMNPQRSTVWY")
MASK_DIRS = {"masks", "labels", "label", "labelstr"}  # as recipes/medical/data.py reads image/mask folders
# trees have no LR range test, and tabular/xgb chooses max_depth on validation already: its learning rate trades
# rounds (time) for accuracy
TREES_THEN = "xgb_lr=0.01,0.03,0.1"


@dataclass
class Advice:
    table: str  # what the architecture table says
    recipe: str | None  # the zoo recipe to start from (None: the zoo has none)
    config: str  # key=value starting overrides
    reason: str
    also: str = ""  # the comparison worth running
    then: str = ""  # what to sweep next ('' = zoo doctor's LR range test first, then the LR around it)


def bucket(rows: int, edges=(10_000, 100_000)) -> int:
    return 0 if rows < edges[0] else 1 if rows < edges[1] else 2


def recommend(kind: str, rows: int, data: str = "PATH") -> Advice:
    if kind == "corpus":  # raw text counted in tokens: pretraining or adapting a pretrained model
        tokens_m = rows / 1e6
        if rows < 1_000_000:
            return Advice("too little text to pretrain: adapt a pretrained LM", "llm/lora", f"data={data}",
                          f"~{tokens_m:.2g}M tokens: LoRA on a pretrained causal LM learns the style; a model "
                          f"pretrained on it alone would have ~{rows / 20:,.0f} parameters at 20 tokens each",
                          also=f"llm/gpt data={data} (a small model in minutes: the from-scratch baseline)")
        return Advice("pretrain from scratch", "llm/gpt", f"data={data}",
                      f"~{tokens_m:.3g}M tokens: compute-optimal at ~{rows / 20 / 1e6:.3g}M parameters (20 tokens "
                      "each); llm/gpt sizes the depth for the budget", also="llm/lora on a pretrained model; "
                      "zoo plan --params N for the cost of a bigger one")
    if kind not in KINDS:
        raise ZooError(f"--kind {kind}: choose one of {', '.join(KINDS)}")
    if rows < 1:
        raise ZooError(f"--rows {rows}: give the number of samples (1 or more)")
    b = bucket(rows)
    d = f"data={data}"
    if kind == "image":
        return [
            Advice("pretrained CNN + fine-tune", "vision/finetune", f"{d} weights=hub",
                   "under 10K images a pretrained backbone carries most of the knowledge; train the new head first, "
                   "then unfreeze at 10x lower LR (weights=PATH when offline)",
                   also="vision/resnet from scratch: at 32 px and a few minutes it is competitive and needs no weights"),
            Advice("fine-tune a ViT or CNN", "vision/finetune", f"{d} weights=hub",
                   "10K-100K images: fine-tuning still beats scratch at equal compute",
                   also="vision/resnet from scratch as the baseline"),
            Advice("ViT from scratch", "vision/resnet", f"{d} model=vit_small_patch16_224",
                   "past 100K images a ViT trained from scratch catches up (any timm model name works)",
                   also="the default compact ResNet first: a well-tuned ResNet beats a poorly tuned ViT"),
        ][b]
    if kind == "text":
        return [
            Advice("few-shot prompting", "llm/lora", f"{d}",
                   "under 10K examples prompting a pretrained model is the first thing to try (outside the zoo); "
                   "LoRA on a local model is the zoo's nearest recipe"),
            Advice("fine-tune GPT/LLaMA with LoRA", "llm/lora", f"{d}",
                   "10K-100K examples: LoRA on the attention of a pretrained causal LM (model=local folder)"),
            Advice("pretrain from scratch", "llm/gpt", f"{d}",
                   "past 100K documents pretraining pays; llm/gpt sizes the depth for the budget at ~20 tokens per "
                   "parameter (zoo plan --params for bigger budgets)", also="llm/lora on a pretrained model"),
        ][b]
    if kind == "tabular":
        if rows < 50_000:
            return Advice("XGBoost / LightGBM", "tabular/xgb", d,
                          "under ~50K rows gradient-boosted trees win (Grinsztajn et al. 2022)",
                          also="tabular/mlp only as a comparison", then=TREES_THEN)
        if rows < 500_000:
            return Advice("XGBoost, FT-Transformer as a comparison", "tabular/xgb", d,
                          "50K-500K rows: trees still lead; an FT-Transformer is worth one comparison run",
                          also="tabular/mlp model=ft-transformer", then=TREES_THEN)
        return Advice("trees and neural nets both viable", "tabular/xgb", d,
                      "past 500K rows neural nets compete; run both at the same budget",
                      also="tabular/mlp (and model=ft-transformer)", then=TREES_THEN)
    if kind == "audio":
        return Advice(["pretrained Whisper", "fine-tune AST", "from scratch"][b], None, "",
                      "the zoo has no audio recipe yet: use the pretrained audio model the table names")
    if kind == "molecules":
        return [
            Advice("pretrained GNN", "molecules/fp-xgb", f"{d} split=scaffold",
                   "under 10K molecules Morgan fingerprints + XGBoost are the strong baseline (no pretrained GNN in "
                   "the zoo); judge on a scaffold split", also="molecules/dmpnn split=scaffold"),
            Advice("fine-tune a molecular LM", "molecules/dmpnn", f"{d} split=scaffold",
                   "10K-100K molecules: a D-MPNN from scratch is the zoo's nearest (no molecular LM yet)",
                   also="molecules/fp-xgb"),
            Advice("GNN from scratch", "molecules/dmpnn", f"{d} split=scaffold",
                   "past 100K molecules message passing from scratch has the data it needs",
                   also="molecules/fp-xgb"),
        ][b]
    if kind == "protein":
        return [
            Advice("ESM-2 embeddings + head", "protein/esm-embed", d,
                   "under 10K sequences frozen ESM-2 embeddings with a ridge or MLP head; no labels at all: "
                   "protein/esm-zeroshot", also="protein/onehot as the no-pretraining floor"),
            Advice("fine-tune ESM-2", "protein/esm-finetune", d,
                   "10K-100K sequences: LoRA fine-tuning of ESM-2 with layer-wise LR decay",
                   also="protein/esm-embed"),
            Advice("train a protein LM", "protein/esm-finetune", f"{d} esm_model=scratch",
                   "past 100K sequences a protein LM from scratch becomes possible", also="fine-tuning ESM-2"),
        ][b]
    return [
        Advice("pretrained CNN", "medical/unet", d,
               "the zoo's self-configuring U-Net (patch size, batch and depth from the data and budget) is its "
               "starting point; pretrained medical encoders are not bundled"),
        Advice("nnU-Net (self-configuring)", "medical/unet", d, "10K-100K images: the self-configuring U-Net",
               also="medical/swinunetr"),
        Advice("Swin-UNETR / MedSAM", "medical/swinunetr", d, "past 100K images a transformer encoder pays",
               also="medical/unet as the baseline"),
    ][b]


def detect(path: Path) -> tuple[str, int, str]:
    """(kind, number of samples, how it was counted) for a user's file or folder."""
    if not path.exists():
        raise ZooError(f"{path}: no such file or folder")
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")]
        if not files:
            raise ZooError(f"{path}: empty folder")
        names = {p.name.lower() for p in files}
        if any(n.endswith((".nii", ".nii.gz")) for n in names):
            return "medical", sum(n.endswith((".nii", ".nii.gz")) for n in names), "NIfTI volumes"
        images = [p for p in files if p.suffix.lower() in IMAGE_EXT]
        audio = [p for p in files if p.suffix.lower() in AUDIO_EXT]
        if audio and len(audio) >= len(images):
            return "audio", len(audio), "audio files"
        if images:
            masks = [p for p in images if p.parent.name.lower() in MASK_DIRS]
            if masks and len(masks) < len(images):
                return "medical", len(images) - len(masks), "images with masks"
            return "image", len(images), "image files"
        texts = [p for p in files if p.suffix.lower() in (".txt", ".md")]
        if texts:
            return "corpus", sum(p.stat().st_size for p in texts) // 4, "tokens (about 4 bytes each)"
        raise ZooError(f"{path}: no images, audio, volumes or text files found (for a table, give the file)")
    suffix = "".join(path.suffixes[-2:]).lower() if path.name.lower().endswith(".nii.gz") else path.suffix.lower()
    if suffix in (".nii", ".nii.gz"):
        return "medical", 1, "one volume"
    if suffix in (".fasta", ".fa", ".faa"):
        with open(path, errors="replace") as f:
            return "protein", sum(line.startswith(">") for line in f), "FASTA records"
    if suffix in (".txt", ".md"):
        return "corpus", path.stat().st_size // 4, "tokens (about 4 bytes each)"
    if suffix == ".jsonl":
        return "text", _lines(path), "JSONL examples"
    if suffix in (".csv", ".tsv"):
        return _table(path, "\t" if suffix == ".tsv" else ",")
    if suffix == ".sdf":
        with open(path, errors="replace") as f:
            return "molecules", sum(line.startswith("$$$$") for line in f), "SDF records"
    raise ZooError(f"{path}: cannot tell the data type from {suffix or 'no suffix'}; use --kind and --rows")


def table_columns(path: Path) -> list[str]:
    """A CSV/TSV table's header, for the columns a printed command must name."""
    with open(path, newline="", errors="replace") as f:
        return next(csv.reader(f, delimiter="\t" if path.suffix.lower() == ".tsv" else ","), [])


def data_arguments(kind: str, path: Path) -> tuple[str, str]:
    """The key=value pairs a table needs beyond data= (its target: the last column), and a note saying so."""
    if kind not in ("tabular", "molecules") or path.suffix.lower() not in (".csv", ".tsv"):
        return "", ""
    columns = [c.strip() for c in table_columns(path)]
    smiles = next((c for c in columns if c.lower() in ("smiles", "canonical_smiles", "mol")), None)
    rest = [c for c in columns if c != smiles]
    if not rest:
        return "", ""
    pairs = f"target={rest[-1]}" + (f" smiles={smiles}" if smiles and smiles != "smiles" else "")
    return pairs, f"target: the last column ({rest[-1]}), a guess: name yours with target=COLUMN"


def _lines(path: Path) -> int:
    with open(path, errors="replace") as f:
        return sum(1 for line in f if line.strip())


def _table(path: Path, sep: str) -> tuple[str, int, str]:
    with open(path, newline="", errors="replace") as f:
        reader = csv.reader(f, delimiter=sep)
        header = next(reader, None)
        if not header:
            raise ZooError(f"{path}: empty file")
        first = [r for _, r in zip(range(50), reader)]
        rows = len(first) + sum(1 for _ in reader)
    cols = [c.strip().lower() for c in header]
    if any(c in ("smiles", "canonical_smiles", "mol") for c in cols):
        return "molecules", rows, "rows (a SMILES column)"
    if "mutant" in cols or "mutated_sequence" in cols:
        return "protein", rows, "variants (a mutant column)"
    for i, c in enumerate(cols):
        values = [r[i].strip().upper() for r in first if i < len(r) and r[i].strip()]
        if values and all(len(v) >= 20 and set(v) <= AMINO for v in values):
            return "protein", rows, f"rows (sequences in {header[i]!r})"
    return "tabular", rows, "rows"


# ---- compute ----------------------------------------------------------------------------------------------

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_count(text: str) -> float:
    """125M, 1.3B, 7e9, 350k."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgtKMBGT]?)\s*", text)
    if not m:
        raise ZooError(f"--params {text!r}: give a count like 125M, 1.3B or 7e9")
    value = float(m.group(1)) * _SUFFIX.get(m.group(2).lower(), 1.0)
    if value <= 0:
        raise ZooError(f"--params {text!r}: must be positive")
    return value


def compute_plan(params: float, tokens: float | None = None) -> dict:
    """The formulas: D = 20 N (Chinchilla), FLOPs = 6 N D, training memory 18-20 bytes per parameter."""
    d = tokens if tokens else TOKENS_PER_PARAM * params
    return {
        "params": params, "tokens": d, "flops": 6 * params * d,
        "inference_tokens": tuple(k * params for k in INFERENCE_TOKENS_PER_PARAM),
        "inference_flops": tuple(6 * params * k * params for k in INFERENCE_TOKENS_PER_PARAM),
        "train_memory_bytes": tuple(b * params for b in TRAIN_BYTES_PER_PARAM),
        "weights_bf16_bytes": 2 * params,
    }


def activation_bytes(seq_len: int, micro_batch: int, width: int, depth: int, heads: int) -> float:
    """Activations kept for backward in a transformer, bf16, no recomputation (Korthikanti et al. 2022):
    s·b·h·(34 + 5·a·s/h) bytes per layer."""
    s, b, h, a = seq_len, micro_batch, width, heads
    return depth * s * b * h * (34 + 5 * a * s / h)


def human(x: float, unit: str = "") -> str:
    prefixes = ((1e15, "P"), (1e12, "T"), (1e9, "G" if unit else "B"), (1e6, "M"), (1e3, "K"))
    for div, s in prefixes:  # counts: 2.5 B tokens; units: 2.5 GB, 179 GFLOP/s
        if abs(x) >= div:
            return f"{x / div:.3g} {s}{unit}".rstrip()
    return f"{x:.3g} {unit}".rstrip()


def duration(seconds: float) -> str:
    for div, s in ((365 * 86400, "years"), (86400, "days"), (3600, "hours"), (60, "min")):
        if seconds >= div:
            return f"{seconds / div:.3g} {s}"
    return f"{seconds:.3g} s"


def recipe_shape(name: str, overrides: list[str]):
    """The transformer shape a recipe's config describes (its ``shape`` hook; llm/gpt needs depth=N, or --budget
    for what depth=0 would choose)."""
    from recipe_zoo import config, registry

    spec = registry.get(name)
    if "shape" not in spec.hooks:
        shaped = [n for n, r in registry.load_all().items() if "shape" in r.hooks]
        raise ZooError(f"--recipe {name}: no transformer shape to read; use {', '.join(shaped)}, --params N, or "
                       f"--budget B for {name}'s own sizing")
    cfg = config.build(spec.config, spec.defaults, None, overrides, spec.name)
    if getattr(cfg, "depth", 1) <= 0:
        raise ZooError(f"--recipe {name} needs depth=N (depth=0 is sized at run time: add --budget B to see what "
                       "it would choose)")
    shape, params = spec.hooks["shape"](cfg)
    return cfg, shape, params


def print_compute(params: float, *, tokens: float | None, gpus: list[str], gpu_count: int, mfu: float | None,
                  shape=None, cfg=None, log=print) -> None:
    from recipe_zoo.core import devices

    for name in gpus:
        if devices.gpu(name) is None:
            raise ZooError(f"--gpu {name}: unknown; known: {', '.join(_gpu_names())}")
    p = compute_plan(params, tokens)
    log(f"parameters N:          {human(params)}")
    log(f"tokens D:              {human(p['tokens'])}" + (" (Chinchilla: 20 per parameter)" if not tokens else ""))
    lo, hi = p["inference_tokens"]
    log(f"inference-optimal D:   {human(lo)}-{human(hi)} (100-200 per parameter: a smaller model trained longer)")
    log(f"training FLOPs 6·N·D:  {p['flops']:.3g}  (inference-optimal: {p['inference_flops'][0]:.3g}-"
        f"{p['inference_flops'][1]:.3g})")
    mlo, mhi = p["train_memory_bytes"]
    log(f"training memory:       {human(mlo, 'B')}-{human(mhi, 'B')} for weights, gradients and Adam state "
        "(bf16 training, 18-20 bytes per parameter) + activations")
    if shape is not None and not cfg.micro_batch:
        log("activations:           micro_batch=0: the run sizes it to the device's memory (--budget B shows it)")
    elif shape is not None:
        act = activation_bytes(shape.seq_len, cfg.micro_batch, shape.width, shape.depth, shape.heads)
        log(f"activations:           {human(act, 'B')} at micro_batch {cfg.micro_batch} x seq_len {shape.seq_len} "
            "(bf16, none recomputed; activation_checkpointing=true keeps about one layer's)")
    log(f"inference weights:     {human(p['weights_bf16_bytes'], 'B')} in bf16")
    log("")
    width = shape.width if shape is not None else None
    log("time for D tokens (FLOPs / (peak x share of it)):")
    for profile in [devices.cpu()] + [devices.gpu(name, gpu_count) for name in gpus]:
        share = mfu or profile.share("matmul", width)
        count = f"{profile.processes} x " if profile.kind == "cuda" else ""
        label = "this machine" if profile.kind == "cpu" else f"{count}{profile.name}"
        how = "stated" if mfu else "the device profile's" + (f" at width {width}" if width else "")
        log(f"  {label + ':':<14} {duration(p['flops'] / (profile.peak * share * profile.processes)):>14}  "
            f"{profile.peak_source} peak {human(profile.peak, 'FLOP/s')} x {share:.0%} ({how})"
            + (" each" if profile.processes > 1 else ""))


@dataclass
class PlanRun(SimpleRun):
    """What a sizing hook may read from a run: the budget and the data (named datasets as ``zoo run`` finds them);
    it trains nothing and writes nothing."""

    def data_path(self, name: str) -> Path:
        from recipe_zoo.data import locate

        return locate(name)

    def is_dataset(self, name: str) -> bool:
        from recipe_zoo.data import DATASETS

        return name in DATASETS

    def data_key(self, data: str) -> str:
        from recipe_zoo.data import data_key

        return data_key(data)


def print_sizing(spec, overrides: list[str], budget, profile, log=print) -> None:
    """``--recipe NAME --budget B``: the recipe's ``size`` hook on ``profile``."""
    from recipe_zoo import config

    hook = spec.hooks.get("size")
    if hook is None:
        from recipe_zoo import registry

        sized = [name for name, r in registry.load_all().items() if "size" in r.hooks]
        raise ZooError(f"--recipe {spec.name} --budget: {spec.name} has no sizing rule; the recipes that size "
                       f"themselves: {', '.join(sized)}")
    cfg = config.build(spec.config, spec.defaults, None, overrides, spec.name)
    plan = hook(cfg, PlanRun(budget, log=lambda *a, **k: None), profile)
    log(f"{spec.name} for {budget} on {profile.describe(plan.get('work', 'matmul'))}")
    for key, label in (("shape", "shape"), ("batch", "batch"), ("params", "parameters"), ("steps", "steps"),
                       ("rate", "throughput"), ("per_param", "per parameter"), ("data", "data"), ("reason", "why")):
        if key in plan:
            value = plan[key]
            value = human(value) if key == "params" else f"{value:,.0f}" if key == "steps" else value
            log(f"  {label + ':':<15}{value}" + (" (predicted)" if key in ("steps", "rate") else ""))


def _gpu_names() -> list[str]:
    from recipe_zoo.core.flops import GPU_PEAK_TFLOPS

    return list(GPU_PEAK_TFLOPS)


def command(args) -> int:
    """``zoo plan``'s arguments (``zoo/cli.py`` parses them): the architecture table for ``--data``/``--kind``,
    the compute of ``--params``/``--recipe``, and with ``--budget`` the recipe's own sizing on one device."""
    sizing = args.params or args.recipe
    if not sizing and not args.data and not args.kind:
        raise ZooError("zoo plan needs --data PATH, --kind KIND --rows N, --params N or --recipe NAME [--budget B]")
    if args.overrides and not args.recipe:
        raise ZooError(f"key=value pairs ({' '.join(args.overrides)}) go with --recipe")
    if args.budget and not args.recipe:
        raise ZooError("--budget goes with --recipe NAME: what the recipe would choose for that budget")
    if args.device and not args.budget:
        raise ZooError("--device goes with --recipe NAME --budget B")
    if args.data or args.kind:
        if args.data:
            kind, rows, counted = detect(args.data)
            print(f"{args.data}: {kind}, {rows:,} {counted}")
        else:
            if args.rows is None:
                raise ZooError("--kind needs --rows N (the number of samples)")
            kind, rows = args.kind, args.rows
        advice = recommend(kind, rows, str(args.data) if args.data else "PATH")
        print(f"architecture table ({kind}, {rows:,} {'tokens' if kind == 'corpus' else 'samples'}): {advice.table}")
        if advice.recipe:
            pairs, note = data_arguments(kind, args.data) if args.data else ("", "")
            command = f"{advice.recipe} {advice.config} {pairs}".rstrip()
            print(f"start with:  zoo run {command}")
            if note:
                print(f"             {note}")
            if advice.then:
                print(f"then:        zoo sweep {command} {advice.then}")
            else:
                from recipe_zoo import registry
                from recipe_zoo.doctor import lr_fields

                lr = next(iter(lr_fields(registry.get(advice.recipe).config).values()), ("lr",))[0]
                print(f"then:        zoo doctor {command}; zoo sweep {command} {lr}=A,B,C around the LR it suggests")
        print(f"why:         {advice.reason}")
        if advice.also:
            print(f"compare:     {advice.also}")
        if sizing:
            print()
    if args.recipe and args.budget:
        return plan_recipe(args)
    if sizing:
        if args.mfu is not None and not 0 < args.mfu <= 1:
            raise ZooError(f"--mfu {args.mfu}: give a fraction in (0, 1]")
        if args.gpus < 1:
            raise ZooError(f"--gpus {args.gpus}: give 1 or more")
        shape = cfg = None
        if args.recipe:
            cfg, shape, params = recipe_shape(args.recipe, args.overrides)
            print(f"{args.recipe} depth {shape.depth}: width {shape.width}, {shape.heads} heads, vocab {shape.vocab}, "
                  f"context {shape.seq_len}")
        else:
            params = parse_count(args.params)
        tokens = parse_count(args.tokens) if args.tokens else None
        print_compute(params, tokens=tokens, gpus=args.gpu or list(DEFAULT_GPUS), gpu_count=args.gpus,
                           mfu=args.mfu, shape=shape, cfg=cfg)
    return 0


def plan_recipe(args) -> int:
    """``zoo plan --recipe NAME --budget B [--gpu NAME [--gpus N] | --device cpu]``."""
    from recipe_zoo import registry
    from recipe_zoo.core import devices
    from recipe_zoo.runs import parse_budget_arg

    if len(args.gpu) > 1 or (args.gpu and args.device):
        raise ZooError("--recipe with --budget sizes for one device: give one --gpu NAME or --device cpu")
    if args.gpus < 1:
        raise ZooError(f"--gpus {args.gpus}: give 1 or more")
    if args.device and args.device.lower() != "cpu":
        raise ZooError(f"--device {args.device}: cpu (this machine); for a GPU give --gpu NAME")
    name = args.gpu[0] if args.gpu else "cpu"
    profile = devices.named(name, args.gpus)
    if profile is None:
        raise ZooError(f"--gpu {name}: unknown; known: {', '.join(_gpu_names())} (or --device cpu)")
    print_sizing(registry.get(args.recipe), args.overrides, parse_budget_arg(args.budget), profile)
    return 0
