"""Neighbour features for tables with coordinates: for each row, the mean target of its k nearest fitting rows
(by latitude and longitude; k = ``neighbours`` and a quarter of it, 32 and 8 by default) and the distance to its
k-th. Prices, yields and rates vary by place more smoothly than splits on one coordinate at a time can follow; the
trees (and the MLP) read the neighbourhood's level directly.

The neighbours are drawn from a **bank**: the split's fitting rows only, never its validation or test rows, so the
validation rows are scored exactly as test rows and new rows are (their neighbours are bank rows; their own target
is never among them). A bank row's own features leave it out of its neighbours (leave-one-out), or a model could
read its target. The bank (coordinates and target) is saved in the split's feature plan, ``preprocess.json``, for
``zoo predict``: a prediction on one of the bank's own rows sees that row's target among its neighbours, as any
target encoding would.
"""
from __future__ import annotations

import base64
import math

import numpy as np


def plan(X, y: np.ndarray, task: str, bank: np.ndarray, coordinates: list[str] | None, k: int) -> dict | None:
    """The neighbour plan of a split, fitted on ``bank`` (rows of ``X``, the fitting rows; their order is the
    bank's): neighbourhoods of ``k`` and ``k // 4`` rows. None: no coordinate columns, a multiclass target, or k 0."""
    if not coordinates or task == "multiclass" or not k or len(bank) <= k:
        return None
    lat, lon = (X[c].to_numpy(np.float64)[bank] for c in coordinates)
    target = np.asarray(y, np.float64)[bank]
    keep = np.isfinite(lat) & np.isfinite(lon)
    log = task == "regression" and bool((target > 0).all())  # a price's level: its log's mean, not its mean's
    values = np.log1p(target) if log else target
    bank_rows = np.stack([lat, lon, values], axis=1)
    bank_rows[~keep] = np.nan  # kept in place (the bank's order is how its rows leave themselves out), never found
    return {"coordinates": list(coordinates), "k": sorted({max(1, k // 4), k}), "log_target": log,
            "lon_scale": math.cos(math.radians(float(np.nanmean(lat)))) if keep.any() else 1.0,
            "bank": base64.b64encode(bank_rows.astype("<f8").tobytes()).decode("ascii")}


def columns(plan: dict) -> list[str]:
    return [f"near{k}_target" for k in plan["k"]] + [f"near{k}_distance" for k in plan["k"]]


def add(X, plan: dict, self_index: np.ndarray | None = None) -> None:
    """The neighbour columns added to ``X`` in place. ``self_index[i]``: the bank index of row i (-1: not in the
    bank), left out of its own neighbours. Rows without both coordinates get NaN."""
    from sklearn.neighbors import KDTree

    bank = np.frombuffer(base64.b64decode(plan["bank"]), dtype="<f8").reshape(-1, 3)
    scale = np.array([1.0, plan["lon_scale"]])
    found = np.isfinite(bank[:, 0])
    where = np.flatnonzero(found)  # tree index -> bank index
    points = np.stack([X[c].to_numpy(np.float64) for c in plan["coordinates"]], axis=1)
    ok = np.isfinite(points).all(axis=1)
    kmax = max(plan["k"])
    out = {name: np.full(len(X), np.nan) for name in columns(plan)}
    if ok.any():
        dist, idx = KDTree(bank[found, :2] * scale).query(points[ok] * scale, k=min(kmax + 1, len(where)))
        idx = where[idx]  # bank indices, nearest first (ties in the tree's order)
        own = np.full(len(X), -1) if self_index is None else np.asarray(self_index)
        other = idx != own[ok][:, None]
        first = np.argsort(~other, axis=1, kind="stable")[:, :kmax]  # the nearest kmax that are not the row itself
        idx, dist = np.take_along_axis(idx, first, axis=1), np.take_along_axis(dist, first, axis=1)
        for k in plan["k"]:
            out[f"near{k}_target"][ok] = bank[idx[:, :k], 2].mean(axis=1)
            out[f"near{k}_distance"][ok] = dist[:, k - 1]
    for name, v in out.items():
        X[name] = v.astype(np.float32)
