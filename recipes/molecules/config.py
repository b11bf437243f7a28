"""The molecule recipes' settings: ``MolConfig`` (the table, its standardisation and its splits, read the same
way by both), ``DMPNNConfig`` for ``molecules/dmpnn`` (which trains in the core loop) and ``FPXGBConfig`` for
``molecules/fp-xgb``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from recipe_zoo.core.api import Count, Fraction, NonNegative, NonNegativeInt, Positive, Unit, former_fields
from recipe_zoo.core.loop import LoopSettings


@dataclass
class MolConfig:
    # What changes the split, the target or the metric: a run off one of these defaults is another benchmark
    # (a scaffold split of esol is keyed esol:split=scaffold, 5-fold esol:folds=5)
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("split", "split_sizes", "folds", "target", "smiles", "task", "on_invalid",
                                             "exclude")

    data: str = "esol"  # esol | lipophilicity | freesolv | bbbp, or a file: delimited text (CSV, TSV, ...) or SDF
    smiles: str = ""  # SMILES column ('' = the dataset's, or 'smiles'; an SD file's molecules are written to it)
    target: str = ""  # target column(s) or SD properties, comma-separated for multi-task ('' = the dataset's)
    sep: str = ""  # separator of a delimited data= file ('' = sniffed among , tab ; |; 'tab' names a tab)
    comment: str = ""  # lines of data= starting with this are skipped ('' = # lines on top, the last one a header)
    task: Literal["auto", "regression", "classification"] = "auto"  # auto: classification when targets are 0/1
    split: Literal["random", "scaffold"] = "random"  # seeded random, or Bemis-Murcko scaffold groups
    split_sizes: str = "0.8,0.1,0.1"  # train, validation, test fractions
    folds: NonNegativeInt = 0  # k-fold cross-validation (scaffold-aware for split=scaffold); 0 = one split
    on_invalid: Literal["error", "skip", "auto"] = "auto"  # unparsable SMILES: auto = skip for a registered
    # dataset's known-bad rows (BBBP's 11), error for own data
    standardize: bool = True  # RDKit: keep the largest fragment, neutralise charges (salts, counter-ions)
    descriptors: bool = True  # RDKit 2-D descriptors: concatenated to the D-MPNN readout, beside the fingerprints
    exclude: str = ""  # molecules left out before the split: every one in this dataset or CSV (its smiles column),
    # matched as standardised canonical SMILES (pretrain without a later fine-tune's molecules)


@dataclass
class DMPNNConfig(MolConfig, LoopSettings):
    depth: Count = 3  # message-passing steps over directed bonds
    hidden: Count = 300  # message and atom hidden size
    readout: Literal["mean", "sum"] = "mean"  # atom vectors to a molecule vector
    ffn_hidden: Count = 300  # FFN head width
    ffn_layers: Count = 2  # FFN head layers (including the output layer)
    dropout: Fraction = 0.0  # dropout in messages and the head
    ensemble: Count = 1  # models trained (each on budget / n) and averaged
    trees: Fraction = 0.0  # budget share of fp-xgb's XGBoost per split, blended in by a weight chosen on validation
    # (molecules/fp-xgb's Morgan counts + descriptors, its defaults); 0 = none
    lr: Positive = 1e-3  # peak AdamW LR
    weight_decay: NonNegative = 0.0  # AdamW weight decay on weights (never biases)
    batch_size: Count = 50  # molecules per batch
    warmup: Unit = 0.04  # LR warmup fraction (from 0.1 x peak)
    lr_final: NonNegative = 0.1  # LR multiplier at the end (cosine)
    eval_every: Unit = 0.02  # validation this often; the best validation checkpoint is kept
    weights: str = ""  # fine-tune from a finished molecules/dmpnn run (its folder): its encoder and featuriser
    head_fraction: Unit = 0.0  # fine-tune stage 1: this fraction of the budget trains the FFN head alone, on the
    # source's frozen encoder, then everything (chemprop's frozen-encoder transfer, then unfrozen)


@dataclass
class FPXGBConfig(MolConfig):
    radius: NonNegativeInt = 2  # Morgan radius
    bits: Count = 2048  # fingerprint length
    counts: bool = True  # count fingerprints (else bits)
    n_estimators: Count = 3000  # XGBoost trees at most (early stopping on validation)
    xgb_lr: Positive = 0.03  # XGBoost learning rate
    max_depth: Count = 6  # XGBoost tree depth
    early_stopping: Count = 200  # rounds without validation improvement before stopping


# Fields a config file, a sweep's best.json or a saved run may still name from when both recipes shared one config
FPXGBConfig.REPLACED = former_fields(FPXGBConfig, (DMPNNConfig,), "a molecules/dmpnn setting; the trees do not use it",
                                     lr="the trees' learning rate is xgb_lr")
DMPNNConfig.REPLACED = former_fields(DMPNNConfig, (FPXGBConfig,),
                                     "a molecules/fp-xgb setting; the D-MPNN does not use it")
