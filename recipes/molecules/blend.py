"""``molecules/dmpnn trees=S``: molecules/fp-xgb's model (XGBoost on Morgan count fingerprints and the RDKit
descriptors, at its default settings) trained on each split beside the D-MPNN in the share S of the budget, and
the two blended by the weight that scores best on the split's validation molecules. Trees on fingerprints err
differently from a graph network, so the blend beats either alone (docs/LOG.md#2026-12-06-dmpnn-trees-blend).
The boosters are kept beside the networks and ``zoo predict`` blends them the same way.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from recipe_zoo.core.metrics import score_tasks
from recipe_zoo.recipes.molecules import xgb_models
from recipe_zoo.recipes.molecules.config import FPXGBConfig, MolConfig
from recipe_zoo.recipes.molecules.features import morgan
from recipe_zoo.recipes.molecules.scoring import METRIC_NAMES, SCORE_TASK, primary_metric

NET_WEIGHTS = np.linspace(0.0, 1.0, 21)  # the D-MPNN's weight in the blend, searched on validation


def settings(cfg: MolConfig, **morgan_settings) -> FPXGBConfig:
    """The trees' settings: molecules/fp-xgb's defaults (or a card's Morgan settings), on this run's table (its
    data, split and descriptors)."""
    return FPXGBConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(MolConfig)}, **morgan_settings)


def tree_seconds(share: float, budget, splits: int, targets: int) -> float | None:
    """Each booster's time limit under a time budget (None under steps or epochs: its rounds cap alone)."""
    return budget.amount * share / (splits * targets) if budget.kind == "seconds" else None


def fit_split(cfg, run, table, X: np.ndarray, idx: tuple, k: int, seconds: float | None, net: tuple) -> tuple:
    """Split ``k``'s boosters (one per target) and the D-MPNN's weight in the blend, chosen on validation.
    ``idx``: the split's (training, validation, test) rows; ``net``: the D-MPNN's predictions on the validation
    and test rows. Returns (boosters, weight, blended validation predictions, blended test predictions)."""
    train_idx, val_idx, test_idx = idx
    t = settings(cfg)
    boosters = xgb_models.fit_targets(t, table, X, train_idx, val_idx, k, t.n_estimators, seconds, run.seed)
    trees_val = xgb_models.predict_rows(boosters, X[val_idx], table.task)
    trees_test = xgb_models.predict_rows(boosters, X[test_idx], table.task)
    metric, higher = primary_metric(table.task)

    def score(pred: np.ndarray) -> float:
        return score_tasks(table.y[val_idx], pred, SCORE_TASK[table.task], METRIC_NAMES[table.task])[metric]

    scores = np.array([score(w * net[0] + (1 - w) * trees_val) for w in NET_WEIGHTS])
    # Ties (ROC-AUC saturates on a small validation set) go to the weight nearest an even blend.
    tied = np.flatnonzero(scores == (scores.max() if higher else scores.min()))
    best = int(tied[np.argmin(np.abs(NET_WEIGHTS[tied] - 0.5))])
    w = float(NET_WEIGHTS[best])
    run.log(f"split {k}: trees {', '.join(str(b.best_iteration + 1) for b in boosters)} rounds; validation "
            f"{metric}: D-MPNN {score(net[0]):.4f}, trees {score(trees_val):.4f}, blend {scores[best]:.4f} "
            f"at weight {w:.2f} on the D-MPNN")
    return boosters, w, w * net[0] + (1 - w) * trees_val, w * net[1] + (1 - w) * trees_test


# =============================================================================================
# What the run keeps (each split's boosters cut to their best round, and its weight), and predict
# =============================================================================================

def save(run, fitted: list[list], weights: list[float], write: bool = True) -> dict:
    """Each split's boosters as XGBoost JSON (cut to the best validation round; ``write``: the main process), and
    the card's ``blend`` entry: the files per split, the D-MPNN's weight per split and the trees' Morgan settings."""
    files = [[xgb_models.booster_name(k, t, len(fitted), len(b), stem="trees") for t in range(len(b))]
             for k, b in enumerate(fitted)]
    for names, boosters in zip(files, fitted):
        for name, model in zip(names, boosters if write else ()):
            xgb_models.save_best(model, run.dir / name)
    t = FPXGBConfig()
    return {"files": files, "net_weights": weights, "morgan": {"radius": t.radius, "bits": t.bits, "counts": t.counts}}


def load(run) -> dict | None:
    """The card's blend with its boosters loaded (``boosters``: per split, per target), or None (no trees)."""
    entry = run.card.get("blend")
    if entry is None:
        return None
    import xgboost as xgb

    return {**entry, "boosters": [[xgb.Booster(model_file=str(run.path(f))) for f in names]
                                  for names in entry["files"]]}


def table_features(cfg: MolConfig, table, log, blend: dict | None = None) -> np.ndarray:
    """The trees' input for a table's molecules, as cached (molecules/fp-xgb's blocks: the same arrays); ``blend``:
    a card's, for its Morgan settings."""
    return np.concatenate(xgb_models.fingerprints(settings(cfg, **(blend or {}).get("morgan", {})), table, log), axis=1)


def features(blend: dict, mols: list, desc: np.ndarray | None) -> np.ndarray:
    """The trees' input for new molecules: Morgan fingerprints at the card's settings, then the descriptors the
    D-MPNN reads (``desc``, the card's names in order; None: none)."""
    fp = morgan(mols, **blend["morgan"])
    return fp if desc is None else np.concatenate([fp, desc], axis=1)


def mix(blend: dict, k: int, net: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Split ``k``'s blend of the D-MPNN's predictions ``net`` and its boosters' on ``X``."""
    w = blend["net_weights"][k]
    return w * net + (1 - w) * xgb_models.predict_saved(blend["boosters"][k], X)
