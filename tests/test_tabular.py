"""Tabular: reading tables and their bad inputs, task inference, engineered features, the network's
encoding, and both recipes end to end on scikit-learn's bundled tables and small synthetic CSVs."""
import functools
import os

import numpy as np
import pandas as pd
import pytest

import conftest
from conftest import run_doctor, summary_block, zoo
from recipe_zoo.recipes.tabular import data, models
from recipe_zoo.recipes.tabular.config import TabularConfig
from recipe_zoo.core.errors import ZooError

run_ok = functools.partial(conftest.run_ok, budget="8s")
run_bad = functools.partial(conftest.run_bad, budget="5s")


@pytest.fixture
def houses(tmp_path):
    """A small housing-like table: counts whose ratio matters, coordinates, a category, missing values."""
    rng = np.random.default_rng(0)
    n = 1500
    households = np.round(rng.lognormal(6, 0.8, n)) + 10  # long-tailed counts, as census districts are
    rooms = households * rng.uniform(3, 8, n)
    lat, lon = rng.uniform(32, 42, n), rng.uniform(-124, -114, n)
    coast = np.where(lon < -121, "NEAR OCEAN", np.where(lat > 38, "INLAND", "<1H OCEAN"))
    price = 40_000 * rooms / households + 30_000 * (coast == "NEAR OCEAN") - 2_000 * (lat - 32) \
        + rng.normal(0, 10_000, n)
    frame = pd.DataFrame({"id": np.arange(n), "households": households, "total_rooms": rooms.round(),
                          "latitude": lat, "longitude": lon, "coast": coast, "price": price.clip(10_000)})
    frame.loc[rng.choice(n, 40, replace=False), "total_rooms"] = np.nan
    path = tmp_path / "houses.csv"
    frame.to_csv(path, index=False)
    return path


def test_task_inference():
    assert data.encode_target(pd.Series([1.5, 2.0, 3.25]), "auto", "t")[1] == "regression"
    y, task, classes = data.encode_target(pd.Series(["yes", "no", "yes"]), "auto", "t")
    assert task == "binary" and classes == ["no", "yes"] and y.tolist() == [1, 0, 1]
    assert data.encode_target(pd.Series([0, 1, 2, 1]), "auto", "t")[1] == "multiclass"
    with pytest.raises(ZooError, match="one class only"):
        data.encode_target(pd.Series(["a", "a"]), "auto", "t")


def test_columns_ids_mixed_types_and_categories():
    notes = []
    frame = pd.DataFrame({"row_id": np.arange(30), "name": [f"n{i}" for i in range(30)], "size": ["1.5"] * 30,
                          "colour": ["red", "blue", None] * 10, "flag": [True, False] * 15})
    X = data.prepare_columns(frame, set(), "t.csv", notes)
    assert list(X.columns) == ["size", "colour", "flag"] and X["size"].dtype == np.float32
    assert str(X["colour"].dtype) == "category" and X["colour"].isna().sum() == 10
    assert any("'row_id' looks like an id" in n for n in notes) and any("'name' looks like an id" in n for n in notes)
    mixed = pd.DataFrame({"age": ["31", "42", "n/a", "55"]})
    with pytest.raises(ZooError, match=r"column 'age' mixes numbers and text: 1 of 4 .*row 4, 'n/a'"):
        data.prepare_columns(mixed, set(), "t.csv", [])


def test_engineered_ratios_and_rotations():
    frame = pd.DataFrame({"rooms": [10.0, 200, 3000, 40, 5, 60000], "homes": [2.0, 40, 500, 10, 1, 9000],
                          "lat": [34.0, 35, 36, 37, 38, 39], "lon": [-118.0, -119, -120, -121, -122, -123],
                          "age": [30.0, 31, 29, 28, 30, 31]})
    out = data.engineered(frame)
    assert np.allclose(out["rooms/homes"], frame["rooms"] / frame["homes"])
    assert {"rot15", "rot45", "rot75"} <= set(out.columns) and "age/rooms" not in out
    assert np.allclose(out["rot45"], (frame["lat"] + frame["lon"]) / np.sqrt(2), atol=1e-4)


def test_nn_encoding_uses_training_rows_only():
    frame = pd.DataFrame({"x": [1.0, 2.0, np.nan, 100.0], "c": pd.Series(["a", "b", "a", "z"], dtype="category")})
    enc = models.encode_for_nn(frame, np.array([0, 1, 2]), quantile=False, seed=0)
    assert enc.num.shape == (4, 2)  # the value and its missing flag
    assert enc.num[2, 0] == pytest.approx((1.5 - 1.5) / 0.5) and enc.num[2, 1] == 1  # NaN -> train median
    assert enc.cat[:, 0].tolist() == [1, 2, 1, 0] and enc.cardinalities == [3]  # 'z' unseen in training -> 0


def test_values_missing_only_outside_training_are_filled_from_the_other_columns():
    rng = np.random.default_rng(0)
    rooms = rng.integers(100, 5000, 300).astype(np.float32)
    frame = pd.DataFrame({"rooms": rooms, "bedrooms": np.round(rooms / 5), "age": rng.integers(1, 50, 300)})
    truth = frame["bedrooms"].to_numpy().copy()
    frame.loc[[250, 260, 270], "bedrooms"] = np.nan  # missing in test rows only
    logs = []
    out = data.impute_unseen_missing(frame, np.arange(200), logs.append)
    assert np.allclose(out["bedrooms"].iloc[[250, 260, 270]], truth[[250, 260, 270]], rtol=0.1)
    assert "3 values missing outside the training rows" in logs[0] and frame["bedrooms"].isna().sum() == 3
    frame.loc[5, "bedrooms"] = np.nan  # also missing in training: left to the model
    assert data.impute_unseen_missing(frame, np.arange(200)) is frame


def test_xgb_on_a_bundled_table_and_importances():
    s, r = run_ok("tabular/xgb", "data=breast-cancer", "bagging=2")
    assert s["metric"] == "test_accuracy" and float(s["value"]) > 0.9
    run_dir = s["run_dir"]
    table = pd.read_csv(f"{run_dir}/importances.csv")
    assert len(table) > 5 and (table["gain"] > 0).all()
    assert os.path.getsize(f"{run_dir}/importances.png") > 1000


def test_xgb_own_csv_with_categories_missing_values_and_ids(houses):
    s, r = run_ok("tabular/xgb", f"data={houses}", "target=price", "bagging=2")
    log = r.stdout + r.stderr
    assert "'id' looks like an id" in log and "households/total_rooms" in log
    assert float(s["value"]) < 20_000 and s["metric"] == "test_rmse"  # the noise is 10,000


def test_cross_validation_reports_a_spread(houses):
    r = zoo("run", "tabular/xgb", f"data={houses}", "target=price", "bagging=1", "folds=3", "--budget", "6s")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "per fold:" in r.stdout + r.stderr and summary_block(r.stdout)["benchmark"].endswith(":3fold")


@pytest.mark.parametrize("model", ["mlp", "ft-transformer"])
def test_networks_learn(houses, model):
    s, _ = run_ok("tabular/mlp", f"data={houses}", "target=price", f"model={model}", "hidden=64", "layers=2",
                  budget="400steps" if model == "mlp" else "250steps")
    assert float(s["value"]) < 25_000 and model in s["network"]


def test_multiclass_network_with_quantiles():
    s, _ = run_ok("tabular/mlp", "data=wine", "quantile=true", budget="150steps")
    assert s["metric"] == "test_accuracy" and float(s["value"]) > 0.85 and "quantile" in s["network"]


@pytest.mark.parametrize("content, args, message", [
    ("a,b\n1,2\n", ["target=y"], "no column 'y' (columns: a, b)"),
    ("a,y\n1,2\n3,\n4,5\n", ["target=y"], "1 rows have no 'y' (first: row 3)"),
    ("a,y\n1,2\n3,4\n", [], "say which column to predict: target=COLUMN (columns: a, y)"),
    ("a,y\n1,2\n3,4\n", ["target=y", "drop=b"], "drop/categorical names 'b'"),
    ("y\n1\n2\n", ["target=y"], "no feature columns left"),
])
def test_bad_tables(tmp_path, content, args, message):
    path = tmp_path / "t.csv"
    path.write_text(content)
    assert message in run_bad("tabular/xgb", f"data={path}", *args)


def test_nan_targets_can_be_dropped_with_a_count(houses, tmp_path):
    frame = pd.read_csv(houses)
    frame.loc[[3, 7, 11], "price"] = np.nan
    path = tmp_path / "gaps.csv"
    frame.to_csv(path, index=False)
    assert "3 rows have no 'price' (first: row 5)" in run_bad("tabular/xgb", f"data={path}", "target=price")
    s, _ = run_ok("tabular/xgb", f"data={path}", "target=price", "target_nan=drop", "bagging=1")
    assert s["target_nan_dropped"] == "3"


def test_missing_files_and_formats(tmp_path):
    assert "no such file, and not a dataset name" in run_bad("tabular/xgb", "data=housing.csv")
    (tmp_path / "t.json").write_text("{}")
    assert "expected a .csv, .tsv or .parquet file" in run_bad("tabular/xgb", f"data={tmp_path / 't.json'}")
    assert "takes a time budget" in zoo("run", "tabular/xgb", "data=wine", "--budget", "2epochs").stderr


def test_adult_layout_is_read_with_its_test_file(tmp_path, monkeypatch):
    folder = tmp_path / "data" / "tabular" / "adult"
    folder.mkdir(parents=True)
    row = "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 0, 0, 40, "
    (folder / "adult.data").write_text("".join(f"{row}United-States, {'>50K' if i % 3 else '<=50K'}\n"
                                               for i in range(30)))
    (folder / "adult.test").write_text("".join(f"{row}?, {'>50K.' if i % 2 else '<=50K.'}\n" for i in range(10)))

    class FakeRun:
        def data_path(self, name):
            return folder

        def report(self, *a):
            pass

    table = data.load_table(TabularConfig(data="adult"), FakeRun())
    assert table.classes == ["<=50K", ">50K"] and table.task == "binary"
    assert table.test_rows.tolist() == list(range(30, 40)) and table.X["native-country"].isna().sum() == 10


def test_parquet_tables_read_like_csv(houses, tmp_path):
    path = tmp_path / "houses.parquet"
    pd.read_csv(houses).to_parquet(path)
    s, _ = run_ok("tabular/xgb", f"data={path}", "target=price", "bagging=1", budget="4s")
    assert s["status"] == "ok" and float(s["value"]) < 25_000


@pytest.mark.parametrize("name", ["tabular/xgb", "tabular/mlp"])
def test_doctor_runs_clean_on_a_small_table(tmp_path, capsys, name):
    code, findings = run_doctor(name, ["data=wine", "bagging=1", "--steps", "12"], tmp_path)
    assert code == 0, capsys.readouterr().out[-3000:]
    checks = {f["check"] for f in findings}
    assert {"data/balance", "data/leakage"} <= checks and not [f for f in findings if f["severity"] == "error"]
    assert ("overfit/one-batch" in checks) == (name == "tabular/mlp")  # xgb stops after the data checks


def test_doctor_finds_test_rows_copied_from_training_rows(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=100), "b": rng.normal(size=100), "y": rng.normal(size=100)})
    frame.loc[:9, "a"] = np.nan  # missing values are the models' business, not a data error
    path = tmp_path / "twice.csv"
    pd.concat([frame, frame]).to_csv(path, index=False)  # every row twice: the split puts copies on both sides
    code, findings = run_doctor("tabular/xgb", [f"data={path}", "target=y", "--steps", "12"], tmp_path)
    leak = next(f for f in findings if f["check"] == "data/leakage")
    assert leak["severity"] in ("warn", "error") and "exact copies of training rows" in leak["message"]
    assert code == 1 and not any(f["check"] == "data/nonfinite" for f in findings)


# ---------------------------------------------------------------------------------------------
# Bad input, one table: each case through `zoo run` in-process, one line naming the file and row or key
# ---------------------------------------------------------------------------------------------

def _table(rows: int = 30, y=lambda i: f"{i * 1.5}") -> str:
    return "a,b,y\n" + "".join(f"{i},{i % 3},{y(i)}\n" for i in range(rows))


GOOD = _table()


@pytest.mark.parametrize("recipe, name, content, args, needles, budget", [
    ("tabular/xgb", "nope.csv", None, ["target=y"], ["nope.csv", "no such file"], "3steps"),
    ("tabular/mlp", "zero.csv", b"", ["target=y"], ["zero.csv", "empty file"], "3steps"),
    ("tabular/xgb", "header.csv", "a,b,y\n", ["target=y"], ["header.csv", "no rows"], "3steps"),
    ("tabular/mlp", "t.csv", GOOD, ["target=price"], ["t.csv", "no column 'price' (columns: a, b, y)"], "3steps"),
    ("tabular/xgb", "t.csv", _table(y=lambda i: "abc" if i == 4 else i * 1.5), ["target=y"],
     ["t.csv row 6", "'abc'", "not a number"], "3steps"),
    ("tabular/mlp", "t.csv", _table(y=lambda i: "high" if i == 0 else i), ["target=y", "task=regression"],
     ["t.csv row 2", "'high'"], "3steps"),
    ("tabular/mlp", "t.csv", _table(y=lambda i: "" if i in (2, 9) else i * 1.5), ["target=y"],
     ["t.csv", "2 rows have no 'y' (first: row 4)"], "3steps"),
    ("tabular/xgb", "t.csv", _table(y=lambda i: "inf" if i == 7 else i * 1.5), ["target=y"],
     ["t.csv row 9", "not a finite number"], "3steps"),
    ("tabular/xgb", "latin.csv", GOOD.encode().replace(b"\n2,", b"\n\xff\xfe\xfa,"), ["target=y"],
     ["latin.csv row 4", "0xff", "not UTF-8"], "3steps"),
    ("tabular/mlp", "t.csv", GOOD, ["target=y", "hiden=16"], ["unknown key 'hiden'", "did you mean 'hidden'"],
     "3steps"),
    ("tabular/xgb", "t.csv", GOOD, ["targt=y"], ["unknown key 'targt'", "did you mean 'target'"], "3steps"),
    ("tabular/mlp", "t.csv", GOOD, ["target=y", "batch_size=abc"], ["batch_size='abc'", "not a valid int"], "3steps"),
    ("tabular/xgb", "t.csv", GOOD, ["target=y"], ["budget '0s'", "positive"], "0s"),
    ("tabular/mlp", "t.csv", GOOD, ["target=y"], ["budget '-5'"], "-5"),
], ids=["missing-file", "empty-0-bytes", "header-only", "no-target-column", "text-in-numeric-target",
        "text-in-regression-target", "nan-target", "inf-target", "non-utf8", "typo-key-mlp", "typo-key-xgb",
        "ill-typed-value", "budget-0s", "budget-negative"])
def test_bad_input_table(tmp_path, capfd, recipe, name, content, args, needles, budget):
    path = conftest.write_file(tmp_path / name, content)
    conftest.bad_input(capfd, [recipe, f"data={path}", *args], tmp_path / "runs", *needles, budget=budget)
