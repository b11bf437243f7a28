"""``molecules/fp-xgb``: Morgan count fingerprints (and RDKit descriptors) into XGBoost, one model per target
early-stopped on the validation molecules: the strong classical baseline a graph network has to beat. The test
molecules are predicted once the models are final.
"""
from __future__ import annotations

import os
import time

import numpy as np
import torch

from recipe_zoo.core.api import recipe
from recipe_zoo.core.budget import xgboost_time_limit
from recipe_zoo.core.loop import peak_memory_mb
from recipe_zoo.recipes.molecules import data
from recipe_zoo.recipes.molecules.config import FPXGBConfig

# =============================================================================================
# The recipe: fingerprints (+ descriptors), one XGBoost model per target and split, early-stopped on validation
# =============================================================================================

@recipe("molecules/fp-xgb", config=FPXGBConfig, benchmark="esol", metric="test_rmse", higher_is_better=False,
        budget="30s", summary="Morgan count fingerprints (+ RDKit descriptors) into XGBoost with early stopping: "
                              "the strong classical baseline",
        scale_out="single process: XGBoost uses its own threads (nthread = all cores); for several machines "
                  "use xgboost.dask, xgboost.spark or Ray's xgboost_ray with the same parameters")
def train_fp_xgb(cfg: FPXGBConfig, run) -> dict[str, float]:
    import xgboost as xgb

    table = data.load_for(cfg, run)
    features = [data.cached(f"morgan-r{cfg.radius}-b{cfg.bits}-c{int(cfg.counts)}", table,
                            lambda: data.morgan(table.mols, cfg.radius, cfg.bits, cfg.counts))]
    if cfg.descriptors:
        features.append(data.cached("descriptors", table, lambda: data.rdkit_descriptors(table.mols)))
    X = np.concatenate(features, axis=1)
    splits = data.splits_for(cfg, table, run)
    data.inspect_split(run, table, splits[0], loop=False)
    seconds = run.budget.amount / (len(splits) * table.y.shape[1]) if run.budget.kind == "seconds" else None
    predicted, total, trees = [], 0.0, []
    for k, (train_idx, val_idx, test_idx) in enumerate(splits):
        models = []
        for t in range(table.y.shape[1]):
            tr, va = train_idx[~np.isnan(table.y[train_idx, t])], val_idx[~np.isnan(table.y[val_idx, t])]
            params = dict(n_estimators=cfg.n_estimators, learning_rate=cfg.xgb_lr, max_depth=cfg.max_depth,
                          subsample=0.8, colsample_bytree=0.5, min_child_weight=1, tree_method="hist",
                          early_stopping_rounds=cfg.early_stopping, random_state=run.seed, n_jobs=os.cpu_count(),
                          callbacks=[xgboost_time_limit(seconds)] if seconds else None)
            model = xgb.XGBClassifier(**params) if table.task == "classification" else xgb.XGBRegressor(**params)
            start = time.perf_counter()
            model.fit(X[tr], table.y[tr, t], eval_set=[(X[va], table.y[va, t])], verbose=False)
            total += time.perf_counter() - start
            trees.append(model.best_iteration + 1)
            models.append(model)
        run.log(f"split {k}: best iteration {', '.join(map(str, trees[-len(models):]))}")

        def predict(rows: np.ndarray) -> np.ndarray:  # each target's model, on the final (early-stopped) trees
            return np.stack([m.predict_proba(X[rows])[:, 1] if table.task == "classification" else m.predict(X[rows])
                             for m in models], axis=1)

        # This split's models are final: their predictions, scored with the other splits' at the end.
        predicted.append((val_idx, predict(val_idx), test_idx, predict(test_idx)))
    metrics = data.finish(run, table, predicted)
    run.report("features", f"{X.shape[1]} ({cfg.bits} Morgan r{cfg.radius}{' counts' if cfg.counts else ''}"
                           f"{' + RDKit descriptors' if cfg.descriptors else ''})")
    return {**metrics, "train_seconds": total, "trees": float(np.mean(trees)), "molecules": len(table.mols),
            "peak_mem_mb": peak_memory_mb(torch.device("cpu"))}
