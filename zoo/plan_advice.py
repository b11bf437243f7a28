"""Which recipe for this data: the architecture table by data type and size (RECIPE-FACTS), mapped to the zoo's
recipes with a starting config, the reason and the comparison worth running; the data's type and size read from a
user's file or folder; and the advice printed as commands that run as printed (``zoo plan --data | --kind``)."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from recipe_zoo.core.errors import ZooError

KINDS = ("image", "text", "tabular", "audio", "molecules", "protein", "medical")

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
    """What the architecture table says for this kind and amount of data, as a zoo recipe to start from."""
    if kind == "corpus":  # raw text counted in tokens: pretraining or adapting a pretrained model
        return _corpus_advice(rows, data)
    if kind not in KINDS:
        raise ZooError(f"--kind {kind}: choose one of {', '.join(KINDS)}")
    if rows < 1:
        raise ZooError(f"--rows {rows}: give the number of samples (1 or more)")
    d = f"data={data}"
    if kind == "tabular":  # by its own row counts, not the three sizes
        return _tabular_advice(rows, d)
    return _BY_SIZE[kind](bucket(rows), d)


def _corpus_advice(rows: int, data: str) -> Advice:
    """Raw text counted in tokens: adapt a pretrained model below a million, else pretrain from scratch."""
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


def _tabular_advice(rows: int, d: str) -> Advice:
    """Tables by rows: gradient-boosted trees lead until neural nets catch up past 500K."""
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


def _image_advice(b: int, d: str) -> Advice:
    """Images: fine-tune a pretrained backbone, or past 100K train a ViT from scratch."""
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


def _text_advice(b: int, d: str) -> Advice:
    """Labelled text examples: prompting, LoRA, or past 100K documents pretraining."""
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


def _audio_advice(b: int, d: str) -> Advice:
    """Audio: the table's pretrained model (the zoo has no audio recipe)."""
    return Advice(["pretrained Whisper", "fine-tune AST", "from scratch"][b], None, "",
                  "the zoo has no audio recipe yet: use the pretrained audio model the table names")


def _molecules_advice(b: int, d: str) -> Advice:
    """Molecules: fingerprints and trees while small, message passing from scratch as they grow."""
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


def _protein_advice(b: int, d: str) -> Advice:
    """Protein sequences: frozen ESM-2 embeddings, then fine-tuning, then a protein LM from scratch."""
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


def _medical_advice(b: int, d: str) -> Advice:
    """Medical images: the self-configuring U-Net, or past 100K a transformer encoder."""
    return [
        Advice("pretrained CNN", "medical/unet", d,
               "the zoo's self-configuring U-Net (patch size, batch and depth from the data and budget) is its "
               "starting point; pretrained medical encoders are not bundled"),
        Advice("nnU-Net (self-configuring)", "medical/unet", d, "10K-100K images: the self-configuring U-Net",
               also="medical/swinunetr"),
        Advice("Swin-UNETR / MedSAM", "medical/swinunetr", d, "past 100K images a transformer encoder pays",
               also="medical/unet as the baseline"),
    ][b]


_BY_SIZE = {"image": _image_advice, "text": _text_advice, "audio": _audio_advice, "molecules": _molecules_advice,
            "protein": _protein_advice, "medical": _medical_advice}  # each by bucket(): <10K, 10K-100K, more


def advise(data: Path | None, kind: str | None, rows: int | None) -> None:
    """``--data PATH`` (its kind and size read from it) or ``--kind K --rows N``: the table's row, the command to
    start with and what to sweep then, why, and the comparison worth running."""
    if data:
        kind, rows, counted = detect(data)
        print(f"{data}: {kind}, {rows:,} {counted}")
    elif rows is None:
        raise ZooError("--kind needs --rows N (the number of samples)")
    advice = recommend(kind, rows, str(data) if data else "PATH")
    print(f"architecture table ({kind}, {rows:,} {'tokens' if kind == 'corpus' else 'samples'}): {advice.table}")
    if advice.recipe:
        _print_commands(advice, kind, data)
    print(f"why:         {advice.reason}")
    if advice.also:
        print(f"compare:     {advice.also}")


def _print_commands(advice: Advice, kind: str, data: Path | None) -> None:
    """``zoo run`` with the advice's config (a table's target named), then the sweep (after the doctor's LR range
    test, for recipes that have one)."""
    pairs, note = data_arguments(kind, data) if data else ("", "")
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

