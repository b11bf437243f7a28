"""stream=true for the tables. tabular/xgb: the table read 97 or 128 rows a chunk gives stream=false's split (the
same rows in train/validation/test), column types, categories and feature plans (preprocess.json equal), the same
choice on validation, a test metric close to stream=false's, and a run ``zoo predict`` reproduces; CSV and parquet,
a column whose type differs between chunks, a sample smaller than the table; bad inputs in one line. tabular/mlp:
trained from the rows encoded on disk, bitwise stream=false's network and metrics (one split and folds, CSV and
parquet), its arrays removed after. Wall time on 2 shared cores: 16-24 s for xgb (41 s at a load of 10: XGBoost's
two threads wait on a busy core), ~10 s for mlp; each run in this process."""
import json

import numpy as np
import pandas as pd
import pytest

from conftest import bad_input, roundtrip, summary_block, train_in_process, zoo, zoo_in_process
from houses import houses as houses_table
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
    houses = houses_table(rng, n)
    houses.insert(3, "age", pd.array(rng.integers(1, 50, n), dtype="Int64"))
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


def _train(out, *args, budget="300steps", recipe="tabular/xgb"):
    """``zoo run RECIPE ARGS`` in this process: (summary metrics, run directory, log lines, preprocess.json)."""
    run_dir = train_in_process(out, recipe, *args, budget=budget)
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
    # the noise is 10,000; 300 test rows move ~5% between feature sets (neighbours from a bank of ~330 sampled rows
    # here: 20,975; the full table's in memory: 20,792, without neighbours 20,490)
    assert metrics["test_rmse"] < 22_000
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


@pytest.mark.parametrize("name, args", [
    ("houses.csv", ["target=price", "quantile=true"]),
    pytest.param("classes.parquet", ["target=label", "categorical=code", "target_nan=drop", "folds=2"],
                 marks=pytest.mark.slow),
])
def test_mlp_streams_bitwise_as_in_memory(tables, tmp_path, monkeypatch, name, args):
    """Up to the sample's size, the encoding and every batch are stream=false's: the same weights to the bit."""
    monkeypatch.setattr(stream, "CHUNK_ROWS", 128)
    mlp = ["tabular/mlp", f"data={tables / name}", *args, "hidden=32", "layers=2", "batch_size=64"]
    m_mem, r_mem, _, p_mem = _train(tmp_path / "memory", *mlp[1:], budget="40steps", recipe=mlp[0])
    m_str, r_str, logs, p_str = _train(tmp_path / "stream", *mlp[1:], "stream=true", budget="40steps", recipe=mlp[0])
    assert p_str == p_mem and _split(r_str).equals(_split(r_mem))
    for weights in sorted(r_mem.glob("model*.safetensors")):  # bit for bit: one process, and both paths gather each
        # batch into a fresh tensor (torch's aligned allocator) of the same numbers: the same ops in the same order
        assert (r_str / weights.name).read_bytes() == weights.read_bytes()
    quality = {k: v for k, v in m_mem.items() if k.startswith(("test_", "val_"))}
    assert quality and {k: m_str[k] for k in quality} == quality
    assert any("rows encoded in" in line and ".encoded/split0" in line for line in logs)
    assert not (r_str / ".encoded").exists()  # the arrays are the run's scratch, not its output
    roundtrip(r_str)


def test_mlp_stream_on_a_sample(tables, tmp_path, monkeypatch):
    """A table larger than the sample: plans and encoding fitted on the sample's training rows, every row trained."""
    monkeypatch.setattr(stream, "SAMPLE_ROWS", 500)
    monkeypatch.setattr(stream, "CHUNK_ROWS", 256)
    metrics, run_dir, logs, _ = _train(tmp_path, f"data={tables / 'houses.csv'}", "target=price", "stream=true",
                                       budget="300steps", recipe="tabular/mlp")
    assert any("feature plans fitted on 500 sampled rows" in line for line in logs)
    assert any("1500 rows encoded" in line for line in logs)
    assert metrics["test_rmse"] < 30_000  # the noise is 10,000; the target's spread ~60,000
    roundtrip(run_dir)


def test_mlp_stream_refuses_a_named_table(tmp_path, capfd):
    bad_input(capfd, ["tabular/mlp", "data=wine", "stream=true"], tmp_path, "stream=true reads a .csv, .tsv or "
              ".parquet file", "wine is read in memory")


@pytest.mark.slow
def test_a_killed_mlp_stream_resumes_exactly(tables, tmp_path):
    """SIGKILL mid-training, then ``zoo run --resume``: the arrays are written again and the run ends where an
    uninterrupted one does, to the bit."""
    from test_reliability import assert_same_run, start, the_run_dir, wait_for_step

    args = ["tabular/mlp", f"data={tables / 'houses.csv'}", "target=price", "stream=true", "hidden=16",
            "eval_every=0.25", "log_every=0", "checkpoint_every=0", "--budget", "60steps", "--seed", "3"]
    ref = zoo_in_process("run", *args, "--out", tmp_path / "ref")
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    out = tmp_path / "runs"
    proc = start(args, out)
    wait_for_step(proc, 25, checkpoint_of=out)
    proc.kill()
    proc.wait(timeout=60)
    run_dir = the_run_dir(out, "tabular/mlp")
    assert (run_dir / ".encoded" / "split0" / "num.npy").exists()  # a kill leaves the arrays; resume rewrites them
    resumed = zoo_in_process("run", "--resume", run_dir, "--out", out)
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stdout[-2000:] + resumed.stderr
    assert summary_block(resumed.stdout)["value"] == summary_block(ref.stdout)["value"]
    assert_same_run(the_run_dir(tmp_path / "ref", "tabular/mlp"), run_dir)
    assert not (run_dir / ".encoded").exists()


@pytest.mark.slow
def test_mlp_stream_under_torchrun(tables, tmp_path):
    """Two processes: rank 0 encodes into its run folder, both read their own batches from there; the run is the
    two-process in-memory run to the bit, and the arrays are gone after."""
    args = ["run", "tabular/mlp", f"data={tables / 'houses.csv'}", "target=price", "hidden=16", "--budget", "40steps",
            "--nproc", "2"]
    memory, streamed = zoo(*args, "--out", tmp_path / "m"), zoo(*args, "stream=true", "--out", tmp_path / "s")
    assert memory.returncode == 0 and streamed.returncode == 0, streamed.stdout[-2000:] + streamed.stderr[-2000:]
    assert summary_block(streamed.stdout)["value"] == summary_block(memory.stdout)["value"]
    (m_dir,), (s_dir,) = (tmp_path / "m" / "tabular" / "mlp").iterdir(), (tmp_path / "s" / "tabular" / "mlp").iterdir()
    assert (s_dir / "model.safetensors").read_bytes() == (m_dir / "model.safetensors").read_bytes()
    assert not (s_dir / ".encoded").exists()
