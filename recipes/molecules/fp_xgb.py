"""``molecules/fp-xgb``: Morgan count fingerprints (and RDKit descriptors) into XGBoost, one model per target
early-stopped on the validation molecules: the strong classical baseline a graph network has to beat. The test
molecules are predicted once the models are final; each model is then kept as XGBoost JSON (cut to its best
iteration), the featuriser's settings on the card. ``zoo predict`` applies them to a CSV of SMILES, ``zoo export
--format xgboost-json`` hands them over with ``features.json``.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core import artifact, distributed
from recipe_zoo.core.api import recipe
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import peak_memory_mb
from recipe_zoo.recipes.molecules import inference
from recipe_zoo.recipes.molecules.xgb_models import (booster_name, features, fingerprints, fit_targets,
                                                     predict_rows, predict_saved, save_best)
from recipe_zoo.recipes.molecules.config import FPXGBConfig
from recipe_zoo.recipes.molecules.run_data import inspect_split, load_for, splits_for
from recipe_zoo.recipes.molecules.scoring import finish

# =============================================================================================
# What the run keeps (each target's early-stopped trees as XGBoost JSON, the card), predict and export
# =============================================================================================

def save_fp_xgb(cfg: FPXGBConfig, run, table, fitted: list, predicted: list) -> None:
    """After scoring: each model cut to its best validation iteration (the trees that were scored; its JSON then
    predicts the same with no early-stopping state), the card and the test molecules' predictions. A SimpleRun
    (tests, notebooks) has no run directory of its own and keeps nothing."""
    if run.spec is None:
        return
    tasks = table.y.shape[1]
    names = [booster_name(k, t, len(fitted), tasks) for k in range(len(fitted)) for t in range(tasks)]
    if distributed.is_main():
        for name, model in zip(names, (m for split in fitted for m in split)):
            save_best(model, run.dir / name)
    pre = inference.featuriser(cfg, table, morgan={"radius": cfg.radius, "bits": cfg.bits, "counts": cfg.counts})
    models = [{"file": n, "fold": i // tasks, "target": table.targets[i % tasks]} for i, n in enumerate(names)]
    selected = "early-stopped trees (best validation iteration), one model per target" + (
        f", {len(fitted)} folds (new data: the mean over folds)" if len(fitted) > 1 else "")
    artifact.write_card(run.dir, recipe=run.spec.name, task=table.task, weights=names, selected=selected,
                        preprocess=pre, evaluation={"folds": len(fitted)}, models=models)
    artifact.write_predictions(run.dir, inference.split_rows(table, pre["smiles"], predicted, pre))


def load_boosters(run) -> list[list]:
    """The saved boosters, per split, one per target in the card's order."""
    import xgboost as xgb

    out: list[list] = []
    for entry in run.card["models"]:
        if entry["fold"] == len(out):
            out.append([])
        out[entry["fold"]].append(xgb.Booster(model_file=str(run.path(entry["file"]))))
    return out


def predict_fp_xgb(cfg: FPXGBConfig, opts: inference.MolPredictOptions, run) -> artifact.Predictions:
    """New molecules: each target's models, averaged over folds. No data=: each split's test (and validation)
    molecules by that split's models, scored as the run scored them."""
    pre = inference.check_featuriser(run)
    boosters = load_boosters(run)

    def split_predict(k: int, X: np.ndarray) -> np.ndarray:  # probabilities for binary:logistic, else values
        return predict_saved(boosters[k], X)

    if not opts.data:
        table, splits = inference.own_table(cfg, run)
        X = np.concatenate(fingerprints(cfg, table, run.log), axis=1)
        predicted = [(val, split_predict(k, X[val]), test, split_predict(k, X[test]))
                     for k, (_, val, test) in enumerate(splits)]
        return inference.own_split(table, pre["smiles"], predicted, finish(run, table, predicted), pre)
    inp = inference.read_molecules(opts, run, pre)

    def some(mols: list) -> np.ndarray:
        X = features(cfg, mols, pre["descriptors"])
        return np.mean([split_predict(k, X) for k in range(len(boosters))], axis=0)

    return inference.new_rows(inp, inference.in_batches(inp.mols, opts.batch_size or 1024, some,
                                                        len(pre["targets"]), run), pre)


def export_xgboost_json(cfg: FPXGBConfig, run, out: Path) -> list[Path]:
    """The boosters as XGBoost JSON and ``features.json``: how to make their input (Morgan settings, descriptor
    names in order, RDKit version) and read their output, so XGBoost alone (and RDKit) can use them."""
    out.mkdir(parents=True, exist_ok=True)
    written = [Path(shutil.copy2(run.path(m["file"]), out / m["file"])) for m in run.card["models"]]
    pre = run.card["preprocess"]
    spec = {"recipe": run.card["recipe"], "task": pre["task"], "targets": pre["targets"], "rdkit": pre["rdkit"],
            "standardize": pre["standardize"], "morgan": pre["morgan"], "descriptors": pre["descriptors"] or [],
            "input": "float32 columns: the Morgan fingerprint (rdFingerprintGenerator.GetMorganGenerator(radius, "
                     "fpSize=bits); counts or bits), then the RDKit descriptors named, in order (NaN where missing), "
                     "of the molecule standardised (rdMolStandardize.ChargeParent) when standardize is true",
            "output": "booster.inplace_predict(X): " + ("the probability of 1" if pre["task"] == "classification"
                                                        else "the target") + "; several folds: the mean over folds",
            "models": run.card["models"]}
    (out / "features.json").write_text(json.dumps(spec, indent=1) + "\n")
    return [*written, out / "features.json"]


# =============================================================================================
# The recipe: fingerprints (+ descriptors), one XGBoost model per target and split, early-stopped on validation
# =============================================================================================

@recipe("molecules/fp-xgb", config=FPXGBConfig, benchmark="esol", metric="test_rmse", higher_is_better=False,
        budget="30s", summary="Morgan count fingerprints (+ RDKit descriptors) into XGBoost with early stopping: "
                              "the strong classical baseline",
        scale_out="single process: XGBoost uses its own threads (nthread = all cores); for several machines "
                  "use xgboost.dask, xgboost.spark or Ray's xgboost_ray with the same parameters",
        predict=predict_fp_xgb, predict_options=inference.MolPredictOptions,
        exports={"xgboost-json": export_xgboost_json})
def train_fp_xgb(cfg: FPXGBConfig, run) -> dict[str, float]:
    if run.budget.kind == "epochs":
        raise ZooError("molecules/fp-xgb takes a time budget (--budget 30s) or a cap on boosting rounds (--budget "
                       "500steps)")
    table = load_for(cfg, run)
    X = np.concatenate(fingerprints(cfg, table, run.log), axis=1)
    splits = splits_for(cfg, table, run)
    inspect_split(run, table, splits[0], loop=False)
    seconds = run.budget.amount / (len(splits) * table.y.shape[1]) if run.budget.kind == "seconds" else None
    rounds = min(cfg.n_estimators, int(run.budget.amount)) if run.budget.kind == "steps" else cfg.n_estimators
    predicted, total, trees, fitted = [], 0.0, [], []
    for k, (train_idx, val_idx, test_idx) in enumerate(splits):
        start = time.perf_counter()
        models = fit_targets(cfg, table, X, train_idx, val_idx, k, rounds, seconds, run.seed)
        total += time.perf_counter() - start
        trees.extend(m.best_iteration + 1 for m in models)
        fitted.append(models)
        run.log(f"split {k}: best iteration {', '.join(map(str, trees[-len(models):]))}")
        # This split's models are final: their predictions, scored with the other splits' at the end.
        predicted.append((val_idx, predict_rows(models, X[val_idx], table.task), test_idx,
                          predict_rows(models, X[test_idx], table.task)))
    metrics = finish(run, table, predicted)
    save_fp_xgb(cfg, run, table, fitted, predicted)
    run.report("features", f"{X.shape[1]} ({cfg.bits} Morgan r{cfg.radius}{' counts' if cfg.counts else ''}"
                           f"{' + RDKit descriptors' if cfg.descriptors else ''})")
    return {**metrics, "train_seconds": total, "trees": float(np.mean(trees)), "molecules": len(table.mols),
            "peak_mem_mb": peak_memory_mb(torch.device("cpu"))}
