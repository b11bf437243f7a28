"""What a protein run keeps for inference and how its predict hook reads it back. No pickle: a head on fixed
features (ridge, kernel ridge, MLP) is ``head.safetensors`` (the feature scaling, the coefficients or weights) with
its scalars (alpha, gamma, target mean and std) in ``model.json`` (a rank-target head: its map's knots in the
safetensors); new data is read as ``inference.py`` reads it; with no ``data=``, predict loads the run's data again
and scores its test split as the run did."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from recipe_zoo.core import artifact
from recipe_zoo.core.distributed import is_main
from recipe_zoo.core.precision import choose_device
from recipe_zoo.recipes.protein.closed_form import ClosedForm, Features, closed_form_device
from recipe_zoo.recipes.protein.heads import MLPFit
from recipe_zoo.recipes.protein.inference import prediction_columns, read_new, split_metrics, split_rows
from recipe_zoo.recipes.protein.loading import load_data
from recipe_zoo.recipes.protein.ranks import RankedHead, RankMap
from recipe_zoo.recipes.protein.sequences import ProteinData
from recipe_zoo.recipes.protein.supervised import MLPHead

HEAD_FILE = "head.safetensors"


# =============================================================================================
# The heads on fixed features: safetensors + their scalars in model.json
# =============================================================================================

def save_head(run_dir: Path, head: ClosedForm | MLPFit | RankedHead) -> dict:
    """``head.safetensors`` (main process) and what model.json says of the head (a rank-target head: its map's
    knots too)."""
    ranks = head.ranks if isinstance(head, RankedHead) else None
    head = head.inner if ranks is not None else head
    feats = head.feats
    tensors = {"features.keep": torch.from_numpy(np.asarray(feats.keep, dtype=np.int64)),
               "features.mean": torch.from_numpy(np.ascontiguousarray(feats.mean)),
               "features.std": torch.from_numpy(np.ascontiguousarray(feats.std))}
    meta = {"head": head.head, "target_mean": head.mean, "target_std": head.std,
            "target_scale": "standard" if ranks is None else "rank"}
    if ranks is not None:
        tensors.update({"ranks.y": torch.from_numpy(ranks.y), "ranks.z": torch.from_numpy(ranks.z)})
    if isinstance(head, MLPFit):
        tensors.update({f"mlp.{k}": v for k, v in head.model.state_dict().items()})
        first, last = head.model.net[1], head.model.net[4]
        meta.update(d_in=first.in_features, hidden=first.out_features, out=last.out_features,
                    dropout=head.model.net[0].p, task=head.task)
    else:
        tensors["coef"] = head.coef
        if head.basis is not None:
            tensors["basis"] = head.basis
        meta.update(alpha=head.alpha, gamma=head.gamma)
    # column-major matrices (numpy's column indexing, scipy's solves) are stored row-major; predict restores the
    # layout, since BLAS sums in another order for another layout and a near-tie in Spearman's ranks can flip
    meta["column_major"] = [k for k, t in tensors.items() if t.dim() == 2 and t.size(0) > 1 and
                            t.stride() == (1, t.size(0))]
    if is_main():
        artifact.save_tensors(tensors, run_dir / HEAD_FILE)
    return meta


def load_head(run: artifact.PredictRun) -> ClosedForm | MLPFit | RankedHead:
    t = artifact.load_tensors(run.path(HEAD_FILE))
    head = _load_inner(run, t)
    return RankedHead(head, RankMap(t["ranks.y"].numpy(), t["ranks.z"].numpy())) if "ranks.y" in t else head


def _load_inner(run: artifact.PredictRun, t: dict) -> ClosedForm | MLPFit:
    meta = run.card["head"]
    for k in meta.get("column_major", []):
        t[k] = torch.empty_strided(t[k].shape, (1, t[k].size(0)), dtype=t[k].dtype).copy_(t[k])
    feats = Features(t["features.keep"].numpy(), t["features.mean"].numpy(), t["features.std"].numpy())
    if meta["head"] == "mlp":
        device = choose_device(run.device)
        model = MLPHead(meta["d_in"], meta["hidden"], meta["out"], meta["dropout"])
        artifact.fit_state(model, {k[4:]: v for k, v in t.items() if k.startswith("mlp.")}, run.path(HEAD_FILE))
        return MLPFit(feats, model.to(device), meta["target_mean"], meta["target_std"], meta["task"], device)
    device = closed_form_device(run)
    basis = t["basis"].to(device) if "basis" in t else None
    return ClosedForm(meta["head"], meta["alpha"], feats, t["coef"].to(device), basis, meta["gamma"],
                      meta["target_mean"], meta["target_std"])


def save_fixed_head(run, data: ProteinData, head, test_pred: np.ndarray, *, recipe: str, preprocess: dict) -> None:
    """protein/onehot, protein/esm-embed: the head, the card and the test rows."""
    meta = save_head(run.dir, head)
    recipe = artifact.recipe_name(run, recipe)
    selected = ("best-val (the MLP head's best validation state)" if head.head == "mlp" else
                f"{head.head} fitted on train, chosen on validation")
    artifact.write_card(run.dir, recipe=recipe, task=data.task, weights=[HEAD_FILE], selected=selected,
                        classes=data.classes, preprocess=preprocess, head=meta)
    artifact.write_predictions(run.dir, split_rows(data, data.split[2], test_pred))


# =============================================================================================
# Rows and metrics
# =============================================================================================

def predict_fixed(cfg, opts, run: artifact.PredictRun,
                  featurize: Callable[[list[str] | None, np.ndarray | None], np.ndarray],
                  npz: bool = False) -> artifact.Predictions:
    """No data: the run's own test split, scored again (its metrics); else the head's prediction for each row
    of the file, in batches. ``featurize(seqs, emb)``: the features the head was fitted on."""
    head = load_head(run)
    card = run.card
    if not opts.data:
        data = load_data(cfg, run)
        X = featurize(data.seqs, data.emb)
        _, val, test = data.split
        test_pred = head.predict(X[test])
        return artifact.Predictions(rows=split_rows(data, test, test_pred),
                                    metrics=split_metrics(data, head.predict(X[val]), test_pred),
                                    arrays={"prediction": test_pred})
    new = read_new(opts.data, cfg, opts.sequence or cfg.sequence, npz=npz)
    X = featurize(new.seqs, new.emb)
    size = opts.batch_size or 4096
    parts = []
    for start in range(0, len(X), size):
        parts.append(head.predict(X[start:start + size]))
        run.progress(min(start + size, len(X)), len(X), "rows predicted")
    pred = np.concatenate(parts)
    rows = [{**r, **prediction_columns(card["task"], card["classes"], p)} for r, p in zip(new.rows, pred)]
    return artifact.Predictions(rows=rows, arrays={"prediction": pred})
