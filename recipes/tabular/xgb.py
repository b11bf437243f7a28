"""``tabular/xgb``: gradient-boosted trees done right. XGBoost hist with native categoricals; depth (and a log
target) chosen on the validation rows at a quick learning rate, then ``bagging`` models trained on folds of the
training rows (validation left out), each early-stopped on its own fold, and their predictions averaged;
mean-gain importances saved with the run, and every booster as XGBoost JSON (``zoo predict``, ``zoo export --format
xgboost-json``). Trees are the strong default on tables (Grinsztajn et al. 2022).

Where the models are fitted is a ``Fitter``: here from the table in memory (``local_fitter``), on a Dask cluster
(``engine=dask``: ``dask_engine.py``) or here from the file read a chunk at a time (``stream=true``:
``stream.py``, ``stream_xgb.py``); the protocol above and the saved outputs are the same for all three.
"""
from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core import artifact
from recipe_zoo.core.api import recipe
from recipe_zoo.core.budget import xgboost_time_limit
from recipe_zoo.core.checkpoint import replaced
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import peak_memory_mb
from recipe_zoo.core.metrics import score
from recipe_zoo.recipes.tabular import dask_engine, data, inference, protocol, split, stream, stream_xgb
from recipe_zoo.recipes.tabular.config import XGBConfig
from recipe_zoo.recipes.tabular.data import Table

# =============================================================================================
# The model: XGBoost hist, early-stopped on a validation set
# =============================================================================================

def xgb_params(table: Table, cfg: XGBConfig, depth: int, lr: float, seed: int, rounds: int) -> dict:
    """The parameters of one model, whichever engine fits it."""
    params = dict(n_estimators=rounds, learning_rate=lr, max_depth=depth, min_child_weight=1 + depth // 3,
                  subsample=cfg.subsample, colsample_bytree=cfg.colsample, tree_method="hist",
                  enable_categorical=True, max_cat_to_onehot=8, early_stopping_rounds=cfg.early_stopping,
                  random_state=seed)
    if table.task != "regression":
        params["eval_metric"] = "logloss" if table.task == "binary" else "mlogloss"
    return params


def xgb_model(table: Table, cfg: XGBConfig, depth: int, lr: float, seed: int, seconds: float | None,
              rounds: int):
    import xgboost as xgb

    kind = xgb.XGBRegressor if table.task == "regression" else xgb.XGBClassifier
    return kind(**xgb_params(table, cfg, depth, lr, seed, rounds), n_jobs=os.cpu_count(),
                callbacks=[xgboost_time_limit(seconds)] if seconds is not None else None)


@dataclass
class Fitter:
    """Where models are fitted and read. ``fit(depth, lr, seed, seconds, rounds, train, y_train, held, y_held)``: one
    model on the ``train`` rows, early-stopped on the ``held`` rows; ``predict(models, rows, log)``: their mean
    prediction on rows (the choices' and the out-of-fold scores); ``score``: the same for the final validation and
    test scores (default ``predict``); ``close()``: the training data may go."""
    fit: Callable
    predict: Callable
    score: Callable | None = None
    close: Callable = lambda: None


def local_fitter(cfg: XGBConfig, table: Table, view: tuple) -> Fitter:
    """Models fitted here on XGBoost's own threads, on the split's features ``X`` (``dask_engine.fitter``: on a
    cluster; ``stream_xgb.Stream``: from the file a chunk at a time)."""
    X = view[0]

    def fit(depth, lr, seed, seconds, rounds, train, y_train, held, y_held):
        m = xgb_model(table, cfg, depth, lr, seed, seconds, rounds)
        m.fit(X.iloc[train], y_train, sample_weight=data.sample_weights(table, train, cfg),
              eval_set=[(X.iloc[held], y_held)], verbose=False)
        return m

    return Fitter(fit, functools.partial(mean_prediction, X, table.task))


def mean_prediction(X, task: str, models: list, rows: np.ndarray, log: bool) -> np.ndarray:
    return np.mean([xgb_predict(m, X.iloc[rows], task, log) for m in models], axis=0)


def xgb_predict(model, X, task: str, log: bool) -> np.ndarray:
    if task == "regression":
        p = model.predict(X)
        return np.expm1(p) if log else p
    proba = model.predict_proba(X)
    return proba[:, 1] if task == "binary" else proba


# =============================================================================================
# Training: depth (and target transform) chosen on validation, then bagged over folds of the training rows
# =============================================================================================

def fit_xgb(cfg: XGBConfig, run, table: Table, fitter: Fitter, fit_rows: np.ndarray, val: np.ndarray,
            seconds: float | None, rounds: int, label: str = "") -> tuple:
    """Choose depth and target transform on the validation rows (learning rate 0.1, quick, early-stopped on
    validation), then train ``bagging`` models at ``xgb_lr`` on folds of the training rows, each early-stopped on
    its own held-out fold (no final model trains or stops on validation; with bagging=1 the one model early-stops
    on validation); the choices get 30% of a time budget, the final models the rest, each model what is left over
    the models still to train (a fit's own overhead, a cluster's say, is taken from the later ones). ``fitter``:
    where models are fitted and read (``Fitter``). Returns (predict, stats): ``predict(rows)`` averages the
    models' predictions."""
    from sklearn.model_selection import KFold, StratifiedKFold

    metric, higher = data.primary_metric(table.task)
    depths = [cfg.max_depth] if cfg.max_depth else [6, 8, 10]
    logs = data.use_log(table, fit_rows, cfg)
    grid = [(d, lg) for lg in logs for d in depths]
    start = time.perf_counter()
    best = None
    for j, (depth, log) in enumerate(grid):  # 30% of the time for the choices, each the rest over those left
        share = (seconds * 0.3 - (time.perf_counter() - start)) / (len(grid) - j) if seconds else None
        y_fit = np.log1p(table.y[fit_rows]) if log else table.y[fit_rows]
        y_val = np.log1p(table.y[val]) if log else table.y[val]
        m = fitter.fit(depth, 0.1, run.seed, share, rounds, fit_rows, y_fit, val, y_val)
        value = score(table.y[val], fitter.predict([m], val, log), table.task, (metric,))[metric]
        run.log(f"{label}choice: depth {depth}{', log target' if log else ''}: validation {metric} {value:.4f} "
                f"({m.best_iteration + 1} rounds)")
        if best is None or data.better(value, best[0], higher):
            best = (value, depth, log)
    _, depth, log = best
    k = max(1, cfg.bagging)
    if k == 1:
        folds = [(fit_rows, val)]
    else:
        split.enough_rows(table, k, f"bagging={k}", fit_rows)
        kind = KFold if table.task == "regression" else StratifiedKFold
        folds = [(fit_rows[a], fit_rows[b]) for a, b in kind(k, shuffle=True, random_state=run.seed).split(
            np.zeros(len(fit_rows)), table.y[fit_rows] if table.task != "regression" else None)]
    oof, models, iters = np.zeros(len(table.y)) if table.task != "multiclass" else None, [], []
    for i, (tr, va) in enumerate(folds):
        y_tr = np.log1p(table.y[tr]) if log else table.y[tr]
        y_va = np.log1p(table.y[va]) if log else table.y[va]
        left = (seconds - (time.perf_counter() - start)) / (k - i) if seconds else None
        m = fitter.fit(depth, cfg.xgb_lr, run.seed + i, left, rounds, tr, y_tr, va, y_va)
        if oof is not None:
            oof[va] = fitter.predict([m], va, log)
        models.append(m)
        iters.append(m.best_iteration + 1)
    stats = {"depth": depth, "log_target": log, "rounds": float(np.mean(iters)), "models": models,
             "train_seconds": time.perf_counter() - start}
    if oof is not None and k > 1:
        stats[f"oof_{metric}"] = score(table.y[fit_rows], oof[fit_rows], table.task, (metric,))[metric]
    run.log(f"{label}final: depth {depth}{', log target' if log else ''}, lr {cfg.xgb_lr}, {k} model(s) of "
            f"{', '.join(map(str, iters))} rounds" + (f"; out-of-fold {metric} {stats[f'oof_{metric}']:.4f}"
                                                       if f"oof_{metric}" in stats else ""))

    fitter.close()
    return functools.partial(fitter.score or fitter.predict, models, log=log), stats


def save_importances(models: list, run) -> None:
    """Mean gain per feature over the bagged models: importances.csv and importances.png in the run."""
    total: dict[str, float] = {}
    for m in models:
        for k, v in m.get_booster().get_score(importance_type="gain").items():
            total[k] = total.get(k, 0.0) + v / len(models)
    rows = sorted(total.items(), key=lambda kv: -kv[1])
    with open(run.dir / "importances.csv", "w") as f:
        f.write("feature,gain\n" + "".join(f"\"{k}\",{v:.6g}\n" for k, v in rows))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        top = rows[:20][::-1]
        fig, ax = plt.subplots(figsize=(7, 0.3 * len(top) + 1.2), constrained_layout=True)
        ax.barh([k for k, _ in top], [v for _, v in top])
        ax.set_xlabel("mean gain")
        ax.set_title("XGBoost feature importance")
        fig.savefig(run.dir / "importances.png", dpi=100)
        plt.close(fig)
    except Exception as exc:  # a plot must never fail a finished run
        run.log(f"importance plot skipped: {exc}")
    if rows:
        run.report("top_features", ", ".join(k for k, _ in rows[:3]))


# =============================================================================================
# Predict and export: the saved boosters (XGBoost JSON) on new rows
# =============================================================================================

def load_models(run, split: dict, task: str) -> list:
    """A split's saved models, as the scikit-learn wrappers training used (their JSON keeps best_iteration)."""
    import xgboost as xgb

    models = []
    for name in split["models"]:
        m = xgb.XGBRegressor() if task == "regression" else xgb.XGBClassifier()
        m.load_model(run.path(name))
        models.append(m)
    return models


def predict_xgb(cfg: XGBConfig, opts: inference.TabularPredictOptions, run) -> artifact.Predictions:
    """Rows through the split's saved features, then the mean of its bagged models (``xgb_predict``, as training
    scored), ``batch_size`` rows at a time (default: 65536)."""
    batch = opts.batch_size or 65536

    task = run.card["preprocess"]["table_task"]

    def load_split(k: int, split: dict):
        models = load_models(run, split, task)

        def apply(X, rows: np.ndarray) -> np.ndarray:
            out = []
            for i in range(0, len(rows), batch):
                part = X.iloc[rows[i:i + batch]]
                out.append(np.mean([xgb_predict(m, part, task, split["log_target"]) for m in models], axis=0))
                if len(rows) > batch:  # several batches: worth a progress line
                    run.progress(min(i + batch, len(rows)), len(rows), "rows")
            return np.concatenate(out)

        return apply

    return inference.predict(cfg, opts, run, load_split)


def export_json(cfg: XGBConfig, run, out: Path) -> list[Path]:
    """Every booster as XGBoost JSON (``xgboost.Booster().load_model``; each keeps ``best_iteration``: predict with
    ``iteration_range=(0, best_iteration + 1)``), and ``preprocess.json``: the columns, each split's features, which
    files are its bagged models (averaged) and whether they predict log1p(target)."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    names = [*run.card["weights"], inference.PREPROCESS]
    return [Path(shutil.copy2(run.path(name), out / name)) for name in names]


# =============================================================================================
# The recipe
# =============================================================================================


@recipe("tabular/xgb", config=XGBConfig, benchmark="california-housing", metric="test_rmse",
        higher_is_better=False, budget="1m",
        summary="XGBoost hist with native categoricals, depth and log target chosen on validation, bagged over "
                "folds with early stopping; importances saved",
        scale_out="single process: XGBoost's own threads (nthread = all cores); for more machines engine=dask: "
                  "xgboost.dask on a Dask cluster (scheduler=ADDRESS, or a LocalCluster of dask_workers processes), "
                  "the same models and outputs",
        predict=predict_xgb, predict_options=inference.TabularPredictOptions, exports={"xgboost-json": export_json})
def train_xgb(cfg: XGBConfig, run) -> dict[str, float]:
    if run.budget.kind == "epochs":
        raise ZooError("tabular/xgb takes a time budget (--budget 1m) or a cap on boosting rounds (--budget 500steps)")
    if cfg.stream and cfg.engine != "local":
        raise ZooError("stream=true feeds XGBoost here a chunk at a time; engine=dask sends the table to the cluster "
                       "from memory: use one of them")
    reader = stream if cfg.stream else protocol
    with engine(cfg, run) as (fitter, where):  # first: a missing extra or a dead scheduler is said before the table
        table, views = reader.prepare(cfg, run)
        reader.inspect_split(run, table, views, loop=False)
        seconds = run.budget.amount / len(views) if run.budget.kind == "seconds" else None
        rounds = int(run.budget.amount) if run.budget.kind == "steps" else cfg.n_estimators
        metrics, per_split, total, test_preds = protocol.over_splits(
            run, table, views, lambda k, X, train, val: fit_xgb(cfg, run, table, fitter(table, views[k]), train, val,
                                                                seconds, rounds, f"fold {k}: " if cfg.folds else ""))
    stats = per_split[-1]
    save_importances(stats["models"], run)
    save_models(run, cfg, table, views, per_split, test_preds, where)
    run.report("trees", f"depth {stats['depth']}{', log target' if stats['log_target'] else ''}, "
                        f"{max(1, cfg.bagging)} x {stats['rounds']:.0f} rounds (mean), " + (
                            f"xgboost's own threads ({os.cpu_count()})" if cfg.engine == "local" else
                            f"xgboost.dask on {where['scheduler']} ({where['workers']} workers, "
                            f"{where['threads']} threads)"))
    return {**metrics, "train_seconds": total, "rows": len(table.y), "peak_mem_mb": peak_memory_mb(torch.device("cpu"))}


@contextlib.contextmanager
def engine(cfg: XGBConfig, run):
    """(``fitter(table, view) -> Fitter``, the engine as the card records it): this process's threads (the table in
    memory, or streamed from its file), or a Dask cluster (up while the models train, closed after)."""
    if cfg.engine == "local" and not cfg.stream:
        yield functools.partial(local_fitter, cfg), {"engine": "local", "threads": os.cpu_count()}
    elif cfg.engine == "local":
        yield (lambda table, view: stream_xgb.Stream(cfg, run, table, view, functools.partial(xgb_params, table, cfg),
                                                 xgb_predict)), \
            {"engine": "local", "threads": os.cpu_count(), "stream": stream.SETTINGS}
    else:
        with dask_engine.cluster(cfg, run) as client:
            yield (lambda table, view: Fitter(dask_engine.fitter(
                client, table, view[0], functools.partial(xgb_params, table, cfg),
                functools.partial(data.sample_weights, table, cfg=cfg)),
                functools.partial(mean_prediction, view[0], table.task))), dask_engine.describe(cfg, client)


def save_models(run, cfg: XGBConfig, table, views: list, per_split: list, test_preds: list, where: dict) -> None:
    """Every split's bagged models as XGBoost JSON, with the card and the preprocessing (``inference.save``); the
    card's ``training`` says which engine fitted them."""
    from recipe_zoo.core.distributed import is_main

    splits = []
    for k, stats in enumerate(per_split):
        fold = f"fold{k}_" if len(per_split) > 1 else ""
        splits.append({"models": [f"xgb_{fold}model{i}.json" for i in range(len(stats["models"]))],
                       "log_target": stats["log_target"], "depth": stats["depth"]})
        for name, m in zip(splits[-1]["models"], stats["models"]):
            if is_main():
                with replaced(run.dir / name) as tmp:  # whole or not at all; the .json suffix kept
                    m.save_model(tmp)
    k = len(per_split[0]["models"])
    inference.save(run, cfg, table, views, test_preds, splits, recipe="tabular/xgb",
                   weights=[n for s in splits for n in s["models"]],
                   selected=f"ensemble of {k} bagged models (mean)" if k > 1 else "one model (early-stopped on "
                   "validation)", log_target=[s["log_target"] for s in per_split], training=where)
