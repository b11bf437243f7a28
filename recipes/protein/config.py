"""The protein recipes' settings, in blocks: ``ProteinConfig`` (the data and its split: every recipe), a head
trained on features or on the network (``HeadFields``), an ESM-2 network (``ESMFields``), and each recipe's own
config made of the blocks it reads (``OnehotConfig``, ``FinetuneConfig``; esm-embed, esm-zeroshot and
position-mean declare theirs beside their train function)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from recipe_zoo.core.api import (AnyInt, Count, Fraction, NonNegative, NonNegativeInt, Positive, Range, Unit,
                                 former_fields)
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import LoopSettings

FLIP_DEFAULT = "three_vs_rest"  # the FLIP GB1 split a run takes when split= is empty
HeadDropout = Annotated[float, Range(-1, 1, high_open=True)]  # -1 (head_dropout's choice), else in [0, 1)


@dataclass
class ProteinConfig:
    # what changes the split, the target or the metric: off its default, each names another benchmark
    # (flip-gb1:split=low_vs_high, tem1-esm2-8m:split=positions)
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("split", "split_sizes", "target", "task", "sequence", "label_field",
                                             "mutant")
    data: str = "p62593"  # dataset name (zoo data list), or a FASTA / CSV / NPZ file
    target: str = ""  # CSV column or NPZ array to predict ('' = the dataset's, else 'target')
    sequence: str = "sequence"  # CSV column holding the sequences
    label_field: AnyInt = -1  # FASTA: which '|'-separated header field is the label (-1 = the last)
    task: Literal["auto", "regression", "classification"] = "auto"  # auto: classes when labels are words or 0/1
    split: Literal["", "positions", "one_vs_rest", "two_vs_rest", "three_vs_rest", "low_vs_high", "sampled"] = ""
    # '' (the data's own, else random by a hash of the sequence), positions, or a FLIP split;
    # positions: whole positions held out, by a hash of the position (every mutant at a test position is in test);
    # flip-gb1: one_vs_rest | two_vs_rest | three_vs_rest (its own, '') | low_vs_high | sampled
    split_sizes: str = "0.8,0.1,0.1"  # train, validation, test fractions of a hash-chosen split (or split=positions)
    max_len: Count = 1022  # residues; longer sequences are an error, or cropped with too_long=crop
    too_long: Literal["error", "crop"] = "error"  # crop keeps the first max_len residues
    mutant: str = "mutant"  # mutation column: H24C, or H24C:A50G for multiple mutants

    def __post_init__(self):
        if self.data == "flip-gb1" and self.split == FLIP_DEFAULT:  # one benchmark, one key: flip-gb1
            self.split = ""


@dataclass
class HeadChoice:  # the recipes on fixed features (onehot, esm-embed); esm-finetune's head is always the MLP
    head: Literal["auto", "ridge", "krr", "mlp"] = "auto"  # auto: ridge, RBF kernel ridge and the MLP; the best on
    # validation is kept
    target_scale: Literal["auto", "standard", "rank"] = "auto"  # fit the targets or ranks (auto: split=positions)


@dataclass
class HeadFields:
    hidden: Count = 256  # MLP head width (esm-finetune: the head on pooled embeddings)
    dropout: HeadDropout = -1.0  # MLP head dropout; -1 = 0.1 (esm-embed, onehot: 0.5 under split=positions)
    lr: NonNegative = 0.0  # peak AdamW LR; 0 = mlp head 1e-3, LoRA 1e-3, full fine-tune 3e-5, from scratch 1e-3
    weight_decay: NonNegative = 0.01  # AdamW weight decay on weights (never biases, norms, embeddings)
    batch_size: NonNegativeInt = 0  # sequences per step; 0 = 64 for the MLP head, 16 for fine-tuning
    warmup: Unit = 0.1  # LR warmup fraction, then cosine to zero
    eval_every: Unit = 0.05  # validation this often; the best validation checkpoint is kept


def head_target(cfg, task: str) -> str:
    """The targets the heads on fixed features fit: as set, or (auto) Gaussian ranks where whole positions are held
    out (``ranks.py``), else standardised: ranks scored better on validation under split=positions
    (docs/LOG.md#2026-12-04-protein-rank-targets). Not measured on the random split, nor for protein/onehot, whose
    default is standard."""
    if task != "regression":
        return "standard"
    if cfg.target_scale != "auto":
        return cfg.target_scale
    return "rank" if getattr(cfg, "split", "") == "positions" else "standard"


def head_dropout(cfg, by_split: bool = True) -> float:
    """The MLP head's dropout: as set, or (-1) 0.1, and on fixed features (``by_split``) what the split asks.
    Predicting variants at positions never trained on takes far more regularisation than predicting new variants at
    known positions (0.5 under split=positions: docs/LOG.md#2026-12-04-protein-head-dropout-by-split)."""
    if -1 < cfg.dropout < 0:
        raise ZooError(f"dropout={cfg.dropout:g}: must be in [0, 1), or -1 for the default")
    if cfg.dropout >= 0:
        return cfg.dropout
    return 0.5 if by_split and getattr(cfg, "split", "") == "positions" else 0.1


@dataclass
class ESMFields:
    esm_model: str = "esm2_t6_8M_UR50D"  # fair-esm name (esm2_t6_8M_UR50D ... esm2_t36_3B_UR50D), or scratch
    esm_weights: str = ""  # a local fair-esm .pt file (else the torch hub cache, downloaded when online)
    esm_sha256: str = ""  # the weights file's sha256, checked before it is read (a run logs it; fair-esm gives none)
    scratch_layers: Count = 2  # esm_model=scratch: a randomly initialised ESM-2 of this depth ...
    scratch_dim: Count = 64  # ... width ...
    scratch_heads: Count = 4  # ... and attention heads


@dataclass
class Representation:
    layer: Annotated[int, Range(-1)] = -1  # representation layer (-1 = the last)
    pool: Literal["mean", "bos"] = "mean"  # residue mean (without BOS/EOS), or the BOS token


@dataclass
class OnehotConfig(ProteinConfig, HeadFields, HeadChoice, LoopSettings):
    encoding: Literal["onehot", "blosum"] = "onehot"  # 21 letters per position, or BLOSUM62 rows


@dataclass
class FinetuneConfig(ProteinConfig, HeadFields, ESMFields, Representation, LoopSettings):
    LR_FIELDS: ClassVar[dict] = {"all": ("lr", "head_lr")}  # the LRs zoo doctor's range test scales together
    finetune: Literal["lora", "full"] = "lora"  # LoRA on the attention projections, or every weight
    lora_r: Count = 8  # LoRA rank
    lora_alpha: Count = 16  # LoRA scale numerator (scale = alpha / r)
    lora_dropout: Fraction = 0.05  # dropout on the LoRA input
    layer_decay: Annotated[float, Range(0, 1, low_open=True)] = 1.0  # layer-wise LR decay towards the input (1 =
    # off; 0.8 typical)
    head_lr: Positive = 1e-3  # LR of the new head


def replaced(config: type) -> dict[str, str]:
    """The fields of the one config all protein recipes shared until each got its own: what a config file, a
    sweep's best.json or a saved run may still name, and why ``config`` has it no more."""
    return former_fields(config, (OnehotConfig, FinetuneConfig, "wt", "offset", "toks_per_batch"),
                         "another protein recipe's setting; this one does not use it")


OnehotConfig.REPLACED = replaced(OnehotConfig)
FinetuneConfig.REPLACED = replaced(FinetuneConfig)
