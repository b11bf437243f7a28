"""A table's features for one split, and the plan that repeats them on new rows: values missing only outside the
training rows filled by a ridge on the complete columns, ratios of count-like columns, rotated coordinates and
neighbour features (``neighbours.py``). ``features_for`` fits the plan on a split; ``apply_features`` applies a saved
one (``zoo predict``, streamed chunks).
"""
from __future__ import annotations

import math

import numpy as np

from recipe_zoo.recipes.tabular import neighbours
from recipe_zoo.recipes.tabular.config import TabularConfig
from recipe_zoo.recipes.tabular.data import Table

COORDINATES = (("latitude", "longitude"), ("lat", "lon"), ("lat", "lng"))


def engineered(X, notes: list[str] | None = None, rows: np.ndarray | None = None):
    """Ratios between count-like columns (non-negative whole numbers with a long right tail: rooms, people,
    households; judged on ``rows``, the training rows, when given) and coordinates rotated by 15-75 degrees
    (trees split on one axis at a time)."""
    return add_features(X, engineering_plan(X, rows), notes)


def engineering_plan(X, rows: np.ndarray | None = None) -> dict:
    """The columns ``engineered`` adds, chosen on ``rows``: {"ratios": [[a, b], ...], "coordinates": [lat, lon]}."""
    numeric = [c for c in X.columns if str(X[c].dtype) != "category"]
    counts = []
    for c in numeric:
        v = X[c].to_numpy(np.float64)
        v = v if rows is None else v[rows]
        v = v[np.isfinite(v)]
        if len(v) and v.min() >= 0 and np.all(v == np.round(v)) and np.median(v) > 0 \
                and np.percentile(v, 99) / np.median(v) >= 3:
            counts.append(c)
    counts = counts[:6]
    lower = {c.lower(): c for c in numeric}
    coordinates = next(([lower[lat], lower[lon]] for lat, lon in COORDINATES if lat in lower and lon in lower), None)
    return {"ratios": [[a, b] for i, a in enumerate(counts) for b in counts[i + 1:]], "coordinates": coordinates}


def add_features(X, plan: dict, notes: list[str] | None = None):
    """``X`` with the planned ratio and rotated-coordinate columns (``engineering_plan``)."""
    X = X.copy()
    added = []
    for a, b in plan["ratios"]:
        X[f"{a}/{b}"] = (X[a] / X[b].where(X[b] != 0)).astype(np.float32)
        added.append(f"{a}/{b}")
    if plan["coordinates"]:
        lat, lon = plan["coordinates"]
        for deg in (15, 30, 45, 60, 75):
            t = math.radians(deg)
            X[f"rot{deg}"] = (math.cos(t) * X[lat] + math.sin(t) * X[lon]).astype(np.float32)
        added.append("rotated coordinates")
    if notes is not None and added:
        notes.append(f"features added: {', '.join(added)}")
    return X


def impute_unseen_missing(X, train: np.ndarray, log=None):
    """Fill numeric columns that are missing only outside the training rows. Trees learn no direction for
    a missing value they never saw (XGBoost sends it down an arbitrary branch) and the network gets no
    flag for it; each such value is predicted from the row's complete columns by a ridge regression
    fitted on the training rows (on log1p scale when the columns are non-negative, as counts are)."""
    return impute(X, imputation_plan(X, train), log)


RIDGE_COLUMNS = 64  # a ridge costs rows x columns^2; past this many, only for the columns training fills


def imputation_plan(X, train: np.ndarray) -> dict:
    """For each numeric column complete in the training rows: the ridge regression (on the other complete
    columns) that fills it where it is missing, as JSON-ready lists; new data is filled by the same plan. On wide
    tables (over ``RIDGE_COLUMNS``) a column the table has complete gets its training median only."""
    from sklearn.linear_model import Ridge

    numeric = [c for c in X.columns if str(X[c].dtype) != "category"]
    complete = [c for c in numeric if not X[c].iloc[train].isna().any()]
    if not complete:
        return {}
    block = X[complete].to_numpy(np.float64)
    positive = bool(np.nanmin(block) >= 0)  # log1p scale when every complete column is non-negative, as counts are
    block = np.log1p(block) if positive else block
    plan = {}
    for j, c in enumerate(complete):
        others = [o for o in complete if o != c]
        plan[c] = {"others": others, "positive": positive, "median": float(np.nanmedian(block[train, j]))}
        if others and (len(complete) <= RIDGE_COLUMNS or X[c].isna().any()):
            values = np.concatenate([np.delete(block, j, axis=1), block[:, j:j + 1]], axis=1)
            model = Ridge(alpha=1.0).fit(values[train, :-1], values[train, -1])
            plan[c].update(coef=model.coef_.tolist(), intercept=float(model.intercept_))
    return plan


def impute(X, plan: dict, log=None):
    """``X`` with the planned columns filled where missing (``imputation_plan``): the ridge's value where the row's
    other columns are present, else the training median. Returns ``X`` itself when nothing is missing."""
    out = None
    for c, entry in plan.items():
        missing = X[c].isna().to_numpy()
        if not missing.any():
            continue
        values = X[entry["others"] + [c]].to_numpy(np.float64)
        values = np.log1p(values) if entry["positive"] else values
        usable = missing & ~np.isnan(values[:, :-1]).any(axis=1)
        out = X.copy() if out is None else out
        filled = np.full(missing.sum(), entry["median"])
        if "coef" in entry and usable.any():  # as sklearn's Ridge.predict computes it
            filled[usable[missing]] = values[usable, :-1] @ np.asarray(entry["coef"]) + entry["intercept"]
        out.loc[missing, c] = (np.expm1(filled) if entry["positive"] else filled).astype(np.float32)
        if log:
            log(f"column {c!r}: {int(missing.sum())} values missing outside the training rows and none inside: "
                f"filled by a ridge regression on {len(entry['others'])} complete columns")
    return X if out is None else out


def features_for(cfg: TabularConfig, table: Table, train: np.ndarray, run, bank: np.ndarray):
    """The model's view of the table for one split, and its plan (what ``apply_features`` repeats on new rows):
    unseen-missing values filled, engineered columns added; both fitted on ``train`` (training and validation
    rows), never on the test rows' values. Neighbour features (``neighbours.py``) read the targets of ``bank`` (the
    fitting rows only, so validation is scored as test is), each bank row left out of its own."""
    plan = {"impute": imputation_plan(table.X, train), "engineer": None, "neighbours": None}
    X = impute(table.X, plan["impute"], run.log)
    if cfg.features == "auto":
        plan["engineer"] = engineering_plan(X, train)
        X = add_features(X, plan["engineer"], table.notes)
        plan["neighbours"] = neighbours.plan(X, table.y, table.task, bank, plan["engineer"]["coordinates"],
                                             cfg.neighbours)
        if plan["neighbours"]:
            own = np.full(len(X), -1)
            own[bank] = np.arange(len(bank))
            neighbours.add(X, plan["neighbours"], own)
            table.notes.append(f"features added: {', '.join(neighbours.columns(plan['neighbours']))} (the "
                               f"{len(bank)} fitting rows' targets)")
    return X, plan


def apply_features(X, plan: dict, log=None, own: np.ndarray | None = None):
    """A split's saved feature plan (``features_for``) on rows typed as the table's (``inference.conform``);
    ``own[i]``: row i's index in the neighbour bank, left out of its neighbours (-1: not a bank row)."""
    X = impute(X, plan["impute"], log)
    if plan["engineer"] is not None:
        X = add_features(X, plan["engineer"])
    if plan.get("neighbours"):  # runs saved before neighbour features have no entry
        neighbours.add(X, plan["neighbours"], own)
    return X
