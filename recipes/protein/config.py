"""The config the protein recipes share (protein/onehot, esm-embed, esm-finetune, esm-zeroshot)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from recipe_zoo.core.loop import LoopSettings

FLIP_DEFAULT = "three_vs_rest"  # the FLIP GB1 split a run takes when split= is empty


@dataclass
class ProteinConfig(LoopSettings):
    LR_FIELDS: ClassVar[dict] = {"all": ("lr", "head_lr")}  # the LRs zoo doctor's range test scales together
    # what changes the split, the target or the metric: off its default, each names another benchmark
    # (flip-gb1:split=low_vs_high, tem1-esm2-8m:split=positions)
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("split", "split_sizes", "target", "task", "sequence", "label_field",
                                             "mutant", "wt")
    data: str = "p62593"  # dataset name (zoo data list), or a FASTA / CSV / NPZ file
    target: str = ""  # CSV column or NPZ array to predict ('' = the dataset's, else 'target')
    sequence: str = "sequence"  # CSV column holding the sequences
    label_field: int = -1  # FASTA: which '|'-separated header field is the label (-1 = the last)
    task: Literal["auto", "regression", "classification"] = "auto"  # auto: classes when labels are words or 0/1
    split: str = ""  # '' (the data's own, else random by a hash of the sequence), positions, or a FLIP split
    # positions: whole positions held out, by a hash of the position (every mutant at a test position is in test);
    # flip-gb1: one_vs_rest | two_vs_rest | three_vs_rest (its own, '') | low_vs_high | sampled
    split_sizes: str = "0.8,0.1,0.1"  # train, validation, test fractions of a hash-chosen split (or split=positions)
    max_len: int = 1022  # residues; longer sequences are an error, or cropped with too_long=crop
    too_long: Literal["error", "crop"] = "error"  # crop keeps the first max_len residues
    # heads on fixed features (onehot, esm-embed)
    encoding: Literal["onehot", "blosum"] = "onehot"  # protein/onehot: 21 letters per position, or BLOSUM62 rows
    head: Literal["auto", "ridge", "krr", "mlp"] = "auto"  # auto: ridge, RBF kernel ridge and the MLP; the best on
    # validation is kept
    hidden: int = 256  # MLP head width (esm-finetune: the head on pooled embeddings)
    dropout: float = 0.1  # MLP head dropout
    lr: float = 0.0  # peak AdamW LR; 0 = mlp head 1e-3, LoRA 1e-3, full fine-tune 3e-5, from scratch 1e-3
    weight_decay: float = 0.01  # AdamW weight decay on weights (never biases, norms, embeddings)
    batch_size: int = 0  # sequences per step; 0 = 64 for the MLP head, 16 for fine-tuning
    warmup: float = 0.1  # LR warmup fraction, then cosine to zero
    eval_every: float = 0.05  # validation this often; the best validation checkpoint is kept
    # ESM-2 (fair-esm)
    esm_model: str = "esm2_t6_8M_UR50D"  # fair-esm name (esm2_t6_8M_UR50D ... esm2_t36_3B_UR50D), or scratch
    esm_weights: str = ""  # a local fair-esm .pt file (else the torch hub cache, downloaded when online)
    layer: int = -1  # representation layer (-1 = the last)
    pool: Literal["mean", "bos"] = "mean"  # residue mean (without BOS/EOS), or the BOS token
    toks_per_batch: int = 8192  # tokens per embedding / scoring forward pass
    # esm-finetune
    finetune: Literal["lora", "full"] = "lora"  # LoRA on the attention projections, or every weight
    lora_r: int = 8  # LoRA rank
    lora_alpha: int = 16  # LoRA scale numerator (scale = alpha / r)
    lora_dropout: float = 0.05  # dropout on the LoRA input
    layer_decay: float = 1.0  # layer-wise LR decay towards the input (1 = off; 0.8 typical)
    head_lr: float = 1e-3  # LR of the new head
    scratch_layers: int = 2  # esm_model=scratch: a randomly initialised ESM-2 of this depth ...
    scratch_dim: int = 64  # ... width ...
    scratch_heads: int = 4  # ... and attention heads
    # esm-zeroshot
    mutant: str = "mutant"  # mutation column: H24C, or H24C:A50G for multiple mutants
    wt: str = ""  # wild type: a FASTA file or the sequence itself ('' = the dataset's)
    offset: int = 1  # the number of the wild type's first residue in the mutation strings

    def __post_init__(self):
        if self.data == "flip-gb1" and self.split == FLIP_DEFAULT:  # one benchmark, one key: flip-gb1
            self.split = ""
