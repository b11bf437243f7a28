"""tabular/xgb stream=true: the table read 97 or 128 rows a chunk gives stream=false's split (the same rows in
train/validation/test), column types, categories and feature plans (preprocess.json equal), the same choice on
validation, a test metric close to stream=false's, and a run ``zoo predict`` reproduces; CSV and parquet, a column
whose type differs between chunks, a sample smaller than the table; bad inputs in one line. Wall time on 2 shared
cores: 16-24 s (41 s at a load of 10: XGBoost's two threads wait on a busy core); each run in this process."""
import json

import numpy as np
import pandas as pd
import pytest

from conftest import bad_input, roundtrip, train_in_process
from recipe_zoo.recipes.tabular import stream


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """houses.csv: counts (a ratio engineered), coordinates, a text category, an id (dropped), gaps in the training
    rows and an integer column with gaps in some chunks only (its type differs between chunks). classes.csv and
    .parquet: three classes, text with stray spaces and gaps, true/false, a named integer category, targets
    missing (target_nan=drop)."""
    tmp = tmp_path_factory.mktemp("stream")
    rng = np.random.default_rng(0)
    n = 1500
    households = np.round(rng.lognormal(6, 0.8, n)) + 10
    rooms = households * rng.uniform(3, 8, n)
    lat, lon = rng.uniform(32, 42, n), rng.uniform(-124, -114, n)
    coast = np.where(lon < -121, "NEAR OCEAN", np.where(lat > 38, "INLAND", "<1H OCEAN"))
    price = 40_000 * rooms / households + 30_000 * (coast == "NEAR OCEAN") - 2_000 * (lat - 32) \
        + rng.normal(0, 10_000, n)
    houses = pd.DataFrame({"id": np.arange(n), "households": households, "total_rooms": rooms.round(),
                           "age": pd.array(rng.integers(1, 50, n), dtype="Int64"), "latitude": lat,
                           "longitude": lon, "coast": coast, "price": price.clip(10_000)})
    houses.loc[rng.choice(n, 40, replace=False), "total_rooms"] = np.nan
    houses.loc[700:710, "age"] = pd.NA  # '' in a few chunks: int64 there, float64 in the file read at once
    houses.to_csv(tmp / "houses.csv", index=False)
    m = 900
    x1, x2 = rng.normal(size=m), rng.normal(size=m)
    colour = rng.choice(["red", " green", "blue ", None], m)
    flag = rng.random(m) > 0.5
    score = x1 + (colour == "red") - x2 * flag
    classes = pd.DataFrame({"x1": x1, "x2": x2, "colour": colour, "flag": flag, "code": rng.integers(0, 5, m),
                            "label": np.where(score > 0.8, "high", np.where(score > -0.5, "mid", "low"))})
    classes.loc[[3, 400], "label"] = None
    classes.to_csv(tmp / "classes.csv", index=False)
    classes.to_parquet(tmp / "classes.parquet", row_group_size=200)
    return tmp


def _train(out, *args, budget="300steps"):
    """``zoo run tabular/xgb ARGS`` in this process: (summary metrics, run directory, log lines, preprocess.json)."""
    run_dir = train_in_process(out, "tabular/xgb", *args, budget=budget)
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    return metrics, run_dir, (run_dir / "log.txt").read_text().splitlines(), \
        json.loads((run_dir / "preprocess.json").read_text())


def _both(out, monkeypatch, chunk: int, *args):
    """The same run with stream=false and stream=true (``chunk`` rows a chunk)."""
    monkeypatch.setattr(stream, "CHUNK_ROWS", chunk)
    return _train(out / "memory", *args), _train(out / "stream", *args, "stream=true")


def _choices(logs):
    return [line.split(" ", 1)[1] for line in logs if "choice:" in line]


def _split(run_dir):
    return pd.read_csv(run_dir / "split.csv")


def test_stream_reads_the_table_as_memory_does(tables, tmp_path, monkeypatch):
    (m_mem, r_mem, l_mem, p_mem), (m_str, r_str, logs, p_str) = _both(
        tmp_path, monkeypatch, 128, f"data={tables / 'houses.csv'}", "target=price", "bagging=2", "max_depth=6",
        "xgb_lr=0.1", "subsample=1", "colsample=1")
    assert _split(r_str).equals(_split(r_mem)) and (_split(r_str)["split"] == "test").sum() == 300  # the same rows
    assert p_str == p_mem  # columns, categories, imputation and engineered features: the same plans
    assert any("column types differ between chunks (age)" in line for line in logs)
    assert any("feature plans fitted on 1500 sampled rows" in line for line in logs)
    # No row sampling: the choice (one model on the training rows, early-stopped on validation) is the in-memory
    # one to the last digit; the bagged models differ in how a fold is left out (weight zero in the training
    # matrix, whose bins saw it, against a matrix of the other folds).
    assert _choices(logs) == _choices(l_mem) and len(_choices(logs)) == 1
    assert abs(m_str["test_rmse"] - m_mem["test_rmse"]) / m_mem["test_rmse"] < 0.05
    assert m_str["test_rmse"] < 20_000  # the noise is 10,000 (test_tabular.py asks the same of stream=false)
    card = json.loads((r_str / "model.json").read_text())
    assert card["training"]["stream"]["matrix"] == "QuantileDMatrix"
    roundtrip(r_str)  # zoo predict: every metric and row the stream run reported


def test_classes_from_csv_and_parquet(tables, tmp_path, monkeypatch):
    for name in ("classes.csv", "classes.parquet"):
        (m_mem, r_mem, l_mem, p_mem), (m_str, r_str, l_str, p_str) = _both(
            tmp_path / name, monkeypatch, 97, f"data={tables / name}", "target=label", "categorical=code",
            "target_nan=drop", "bagging=2", "max_depth=3", "subsample=1", "colsample=1")
        assert _split(r_str).equals(_split(r_mem)) and p_str == p_mem and _choices(l_str) == _choices(l_mem)
        assert m_str["test_accuracy"] > 0.75 and abs(m_str["test_accuracy"] - m_mem["test_accuracy"]) < 0.05
    roundtrip(r_str)


def test_a_sample_smaller_than_the_table(tables, tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "SAMPLE_ROWS", 500)
    monkeypatch.setattr(stream, "CHUNK_ROWS", 256)
    metrics, run_dir, logs, _ = _train(tmp_path, f"data={tables / 'houses.csv'}", "target=price", "bagging=2",
                                       "max_depth=6", "xgb_lr=0.1", "stream=true")
    assert any("feature plans fitted on 500 sampled rows" in line for line in logs)
    assert metrics["test_rmse"] < 20_000
    roundtrip(run_dir)


@pytest.mark.parametrize("args, needles", [
    (["data=wine", "stream=true"], ["stream=true reads a .csv, .tsv or .parquet file", "wine is read in memory"]),
    (["stream=true", "engine=dask"], ["stream=true feeds XGBoost here a chunk at a time", "engine=dask"]),
])
def test_bad_stream_settings(tables, tmp_path, capfd, args, needles):
    bad_input(capfd, ["tabular/xgb", f"data={tables / 'houses.csv'}", "target=price", *args], tmp_path, *needles)


def test_a_word_in_a_later_chunk_is_the_in_memory_error(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_ROWS", 50)
    path = tmp_path / "t.csv"
    path.write_text("a,b,y\n" + "".join(f"{i},{'abc' if i == 170 else i % 7},{i * 1.5}\n" for i in range(200)))
    line = bad_input(capfd, ["tabular/xgb", f"data={path}", "target=y", "stream=true"], tmp_path / "runs")
    assert line.endswith("column 'b' mixes numbers and text: 1 of 200 values are not numbers (first: row 172, "
                         "'abc'); fix them, or list the column in categorical=")
