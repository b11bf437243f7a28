"""The tabular recipes' settings: ``TabularConfig`` (the table, its split and features, read the same way by both),
``XGBConfig`` for ``tabular/xgb`` and ``MLPConfig`` for ``tabular/mlp`` (which trains in the core loop)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from recipe_zoo.core.api import (Count, Fraction, NonNegative, NonNegativeInt, Positive, Range, Share, Unit,
                                 former_fields)
from recipe_zoo.core.loop import LoopSettings


@dataclass
class TabularConfig:
    # What changes the split, the target or the metric: a run off one of these defaults is another benchmark
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("target", "task", "test_size", "split_seed", "val_fraction", "folds")

    data: str = "california-housing"  # dataset name (zoo data list), or a .csv / .parquet file
    target: str = ""  # the column to predict ('' = the dataset's)
    drop: str = ""  # columns to leave out, comma-separated
    categorical: str = ""  # columns to treat as categories besides the text ones, comma-separated
    task: Literal["auto", "regression", "binary", "multiclass"] = "auto"  # auto: from the target's values
    target_nan: Literal["error", "drop"] = "error"  # rows whose target is missing: stop, or drop them (counted)
    log_target: Literal["auto", "on", "off"] = "auto"  # regression on log1p(target); auto: xgb tries both on
    # validation when the target is positive and skewed, mlp uses it then
    test_size: Share = 0.2  # held-out fraction when the data has no test file
    split_seed: NonNegativeInt = 42  # the test split's seed: fixed, so runs with different --seed share the test rows
    val_fraction: Share = 0.1  # validation carve-out of the training rows by a hash of each row's content (the
    # same rows for every seed): early stopping, the best state, depth and log-target choices
    folds: NonNegativeInt = 0  # k-fold cross-validation over all rows: mean ± std of the test metrics (0 = one split)
    features: Literal["auto", "none"] = "auto"  # auto: ratios of count-like columns, rotated lat/lon, neighbours
    neighbours: NonNegativeInt = 32  # with lat/lon: mean target of the k and k/4 nearest fitting rows (0 = off)
    class_weight: Literal["none", "balanced"] = "none"  # balanced: weight rows by inverse class frequency
    stream: bool = False  # the file a chunk at a time, never whole (xgb: QuantileDMatrix; mlp: rows encoded to disk)


@dataclass
class MLPConfig(TabularConfig, LoopSettings):
    model: Literal["mlp", "ft-transformer"] = "mlp"  # an MLP over embeddings, or a small FT-Transformer
    hidden: Count = 256  # MLP width (ft-transformer: token width / 4)
    layers: Count = 3  # MLP hidden layers (ft-transformer: blocks)
    dropout: Fraction = 0.1  # dropout in the MLP / transformer
    quantile: bool = False  # numeric features through a normal quantile transform instead of z-scores
    lr: Positive = 1e-3  # peak AdamW LR (warmup, then cosine to zero)
    weight_decay: NonNegative = 1e-5  # AdamW weight decay on weights (never biases, norms, embeddings)
    batch_size: Count = 256  # rows per step
    warmup: Unit = 0.05  # LR warmup fraction
    eval_every: Unit = 0.05  # validation this often; the best validation state is kept (early stopping)
    weights: str = ""  # refit from a finished tabular/mlp run (its folder): its network, input encoding and target
    # scaling kept, trained on this table's rows (new rows of the same columns)


@dataclass
class XGBConfig(TabularConfig):
    max_depth: NonNegativeInt = 0  # tree depth; 0 = chosen on validation from 6, 8, 10
    xgb_lr: Positive = 0.03  # learning rate of the final (bagged) models
    n_estimators: Count = 20000  # rounds at most; early stopping decides
    early_stopping: Count = 200  # rounds without validation improvement before stopping
    subsample: Annotated[float, Range(0, 1, low_open=True)] = 0.8  # rows per tree
    colsample: Annotated[float, Range(0, 1, low_open=True)] = 0.8  # columns per tree
    bagging: Count = 5  # final models, each early-stopped on its own fold of the training rows; averaged
    engine: Literal["local", "dask"] = "local"  # local: XGBoost's threads here; dask: xgboost.dask on a Dask cluster
    scheduler: str = ""  # engine=dask: a Dask scheduler's address (tcp://host:8786); '' = a LocalCluster started here
    dask_workers: Count = 2  # engine=dask without scheduler: LocalCluster worker processes, 1 thread each


# Fields a config file, a sweep's best.json or a saved run may still name from when both recipes shared one config
XGBConfig.REPLACED = former_fields(XGBConfig, (MLPConfig,), "a tabular/mlp setting; the trees do not use it",
                                   lr="the trees' learning rate is xgb_lr",
                                   batch_size="trees read every row; there is no batch")
MLPConfig.REPLACED = former_fields(MLPConfig, (XGBConfig,), "a tabular/xgb setting; the MLP does not use it")
