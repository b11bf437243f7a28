"""Neighbour features (``neighbours.py``): a row's k nearest fitting rows' mean target, where a fitting row never
counts its own target, validation and test rows are found as new rows are, and the plan saved for ``zoo predict``
gives a new row what training gave a test row; off without coordinates, for many classes, or with neighbours=0."""
import numpy as np
import pandas as pd
import pytest

from recipe_zoo.recipes.tabular import neighbours


def _grid(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"latitude": rng.uniform(33, 38, n), "longitude": rng.uniform(-122, -117, n)}), \
        rng.lognormal(11, 0.5, n)


def _brute(X, y, bank, row, k, leave_out):
    """The mean log target of the k nearest bank rows of ``row`` (by the plan's scaled distance), by brute force."""
    scale = np.cos(np.radians(X["latitude"].to_numpy()[bank].mean()))
    d = np.hypot(X["latitude"].to_numpy()[bank] - X["latitude"].iloc[row],
                 (X["longitude"].to_numpy()[bank] - X["longitude"].iloc[row]) * scale)
    if leave_out:
        d[list(bank).index(row)] = np.inf
    return np.log1p(y[bank][np.argsort(d, kind="stable")[:k]]).mean()


def test_bank_rows_leave_themselves_out_and_others_are_found_as_new_rows():
    X, y = _grid()
    bank = np.arange(0, 40)
    plan = neighbours.plan(X, y, "regression", bank, ["latitude", "longitude"], 8)
    assert plan["k"] == [2, 8] and plan["log_target"]
    own = np.full(len(X), -1)
    own[bank] = np.arange(len(bank))
    trained = X.copy()
    neighbours.add(trained, plan, own)
    for row in (0, 17, 39):  # bank rows: their own target is never among their neighbours
        assert trained["near8_target"].iloc[row] == pytest.approx(_brute(X, y, bank, row, 8, True), rel=1e-6)
    for row in (40, 59):  # the others: nearest bank rows, as a new row's
        assert trained["near2_target"].iloc[row] == pytest.approx(_brute(X, y, bank, row, 2, False), rel=1e-6)
    new = X.iloc[40:].copy()
    neighbours.add(new, plan)  # zoo predict's call: no bank rows known
    for name in neighbours.columns(plan):
        assert np.array_equal(new[name].to_numpy(), trained[name].to_numpy()[40:])


def test_a_row_cannot_read_its_own_target():
    """Pure-noise targets at distinct places: with leave-one-out, a fitting row's nearest-neighbour mean is
    uncorrelated with its own target (without it, near1 would be the target itself)."""
    X, _ = _grid(400, seed=1)
    y = np.random.default_rng(2).normal(size=400)
    bank = np.arange(400)
    plan = neighbours.plan(X, y, "regression", bank, ["latitude", "longitude"], 4)
    own = np.arange(400)
    out = X.copy()
    neighbours.add(out, plan, own)
    assert abs(np.corrcoef(out["near4_target"], y)[0, 1]) < 0.15
    leaky = X.copy()
    neighbours.add(leaky, plan)  # the same rows as if new: each finds itself first
    assert np.corrcoef(leaky["near1_target"], y)[0, 1] > 0.99


def test_missing_coordinates_and_when_it_is_off():
    X, y = _grid()
    X.loc[[3, 50], "latitude"] = np.nan
    bank = np.arange(40)
    plan = neighbours.plan(X, y, "regression", bank, ["latitude", "longitude"], 8)
    out = X.copy()
    neighbours.add(out, plan)
    assert np.isnan(out["near8_target"].iloc[50]) and np.isfinite(out["near8_target"].iloc[4])
    assert all(np.isfinite(out["near8_target"].iloc[i]) for i in range(40) if i != 3)  # row 3 is never a neighbour
    assert neighbours.plan(X, y, "regression", bank, None, 8) is None
    assert neighbours.plan(X, y, "regression", bank, ["latitude", "longitude"], 0) is None
    assert neighbours.plan(X, np.arange(60) % 3, "multiclass", bank, ["latitude", "longitude"], 8) is None
    binary = neighbours.plan(X, (y > np.median(y)).astype(float), "binary", bank, ["latitude", "longitude"], 8)
    assert not binary["log_target"]  # a class share, as it is
