"""XGBoost on Morgan fingerprints and RDKit descriptors: the features (as cached), one model per target
early-stopped on its validation molecules, and their predictions. molecules/fp-xgb's model, and the trees that
molecules/dmpnn's ``trees=`` blends in (a module of its own, so that a copy of molecules/dmpnn registers no
second recipe).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from recipe_zoo.core.budget import xgboost_time_limit
from recipe_zoo.core.checkpoint import replaced
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.molecules import feature_cache
from recipe_zoo.recipes.molecules.config import FPXGBConfig
from recipe_zoo.recipes.molecules.features import morgan, rdkit_descriptors


def features(cfg: FPXGBConfig, mols: list, names: list[str] | None) -> np.ndarray:
    """Morgan fingerprints, then the descriptors ``names`` (none: no descriptors), as float32 columns."""
    parts = [morgan(mols, cfg.radius, cfg.bits, cfg.counts)]
    if names:
        parts.append(rdkit_descriptors(mols, names))
    return np.concatenate(parts, axis=1)


def booster_name(k: int, t: int, splits: int, targets: int, stem: str = "xgb") -> str:
    return f"{stem}{f'-fold{k}' if splits > 1 else ''}{f'-target{t}' if targets > 1 else ''}.json"


def save_best(model, path) -> None:
    """A fitted model as XGBoost JSON, cut to its best validation round: the trees that were scored, so the file
    predicts the same with no early-stopping state."""
    with replaced(Path(path)) as tmp:  # whole or not at all; the .json suffix kept (XGBoost's format)
        model.get_booster()[: model.best_iteration + 1].save_model(tmp)


def predict_saved(boosters: list, X: np.ndarray) -> np.ndarray:
    """One split's saved boosters (one per target) on ``X``: probabilities of 1 (binary:logistic), or values."""
    return np.stack([b.inplace_predict(X) for b in boosters], axis=1)


def fingerprints(cfg: FPXGBConfig, table, log) -> list[np.ndarray]:
    """The run's feature blocks of a table, as cached (the same arrays training saw), made in chunks."""
    blocks = [feature_cache.cached(f"morgan-r{cfg.radius}-b{cfg.bits}-c{int(cfg.counts)}", table,
                              lambda mols: morgan(mols, cfg.radius, cfg.bits, cfg.counts), log)]
    if cfg.descriptors:
        blocks.append(feature_cache.cached("descriptors", table, rdkit_descriptors, log))
    return blocks


def fit_targets(cfg: FPXGBConfig, table, X: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray, k: int,
                rounds: int, seconds: float | None, seed: int) -> list:
    """Split ``k``'s models, one per target, each early-stopped on its validation molecules (those with a value);
    ``seconds``: each model's time limit (None: the rounds alone)."""
    import xgboost as xgb

    models = []
    for t in range(table.y.shape[1]):
        tr, va = train_idx[~np.isnan(table.y[train_idx, t])], val_idx[~np.isnan(table.y[val_idx, t])]
        if table.task == "classification" and len(np.unique(table.y[tr, t])) < 2:  # XGBoost would raise
            raise ZooError(f"data={cfg.data}: target {table.targets[t]!r} has one class only among the "
                           f"{len(tr)} training molecules of split {k}; use fewer folds or another split")
        params = dict(n_estimators=rounds, learning_rate=cfg.xgb_lr, max_depth=cfg.max_depth,
                      subsample=0.8, colsample_bytree=0.5, min_child_weight=1, tree_method="hist",
                      early_stopping_rounds=cfg.early_stopping, random_state=seed, n_jobs=os.cpu_count(),
                      callbacks=[xgboost_time_limit(seconds)] if seconds else None)
        model = xgb.XGBClassifier(**params) if table.task == "classification" else xgb.XGBRegressor(**params)
        model.fit(X[tr], table.y[tr, t], eval_set=[(X[va], table.y[va, t])], verbose=False)
        models.append(model)
    return models


def predict_rows(models: list, X: np.ndarray, task: str) -> np.ndarray:
    """Each target's model on the final (early-stopped) trees: probabilities of 1, or values."""
    return np.stack([m.predict_proba(X)[:, 1] if task == "classification" else m.predict(X) for m in models], axis=1)
