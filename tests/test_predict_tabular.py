"""tabular: a finished run is a model. Its own test split scored again from the saved state (metrics and rows as the
run reported them, folds included); new tables (CSV, TSV, parquet) through the columns, imputation and features
training used, giving the run's own predictions for the run's own rows; bad tables in one line; the exports
(XGBoost JSON loaded by xgboost.Booster, ONNX through onnxruntime against torch) and the saved state unpickled."""
import csv
import json

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import predict_bad, roundtrip, train_in_process
from houses import houses as houses_table


def _train(out, recipe, *args, budget="10steps"):
    return train_in_process(out, recipe, *args, budget=budget)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """houses.csv: counts (ratios engineered), coordinates (rotated), a text category, an id column (dropped),
    gaps in the training rows, and ``age`` missing in test rows only (filled by the saved ridge regression).
    classes.csv: three classes from numbers, a text category with gaps, a true/false column and an integer
    column named categorical."""
    from sklearn.model_selection import train_test_split

    tmp = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(0)
    n = 300
    houses = houses_table(rng, n, lat_slope=0)
    houses.insert(3, "age", rng.integers(1, 50, n).astype(float))
    houses.loc[rng.choice(n, 12, replace=False), "total_rooms"] = np.nan
    _, test = train_test_split(np.arange(n), test_size=0.2, random_state=42)  # the recipe's split_seed split
    houses.loc[test[:5], "age"] = np.nan
    houses.to_csv(tmp / "houses.csv", index=False)
    m = 300
    x1, x2 = rng.normal(size=m), rng.normal(size=m)
    colour = rng.choice(["red", "green", "blue", None], m)
    flag = rng.random(m) > 0.5
    score = x1 + (colour == "red") - x2 * flag
    classes = pd.DataFrame({"x1": x1, "x2": x2, "colour": colour, "flag": flag, "code": rng.integers(0, 5, m),
                            "label": np.where(score > 0.8, "high", np.where(score > -0.5, "mid", "low"))})
    classes.to_csv(tmp / "classes.csv", index=False)
    return tmp


@pytest.fixture(scope="module")
def xgb_run(tables):
    return _train(tables / "xgb", "tabular/xgb", f"data={tables / 'houses.csv'}", "target=price", "bagging=2",
                  budget="20steps")


@pytest.fixture(scope="module")
def xgb_folds_run(tables):
    return _train(tables / "xgb_folds", "tabular/xgb", f"data={tables / 'classes.csv'}", "target=label",
                  "categorical=code", "bagging=1", "folds=2", "max_depth=3")


@pytest.fixture(scope="module")
def mlp_run(tables):
    return _train(tables / "mlp", "tabular/mlp", f"data={tables / 'classes.csv'}", "target=label",
                  "categorical=code", "hidden=16", "layers=1")


@pytest.fixture(scope="module")
def ft_folds_run(tables):
    return _train(tables / "ft", "tabular/mlp", f"data={tables / 'houses.csv'}", "target=price", "folds=2",
                  "model=ft-transformer", "hidden=32", "layers=1", "quantile=true", budget="4steps")


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_runs_save_a_card_the_preprocessing_and_every_booster(xgb_run, xgb_folds_run, mlp_run, ft_folds_run):
    card = json.loads((xgb_run / "model.json").read_text())
    assert card["format_version"] == 1 and card["recipe"] == "tabular/xgb" and card["task"] == "regression"
    assert card["weights"] == ["xgb_model0.json", "xgb_model1.json"] and card["files"] == ["preprocess.json"]
    assert card["selected"] == "ensemble of 2 bagged models (mean)" and card["classes"] is None
    assert "households/total_rooms" in card["preprocess"]["features"] and "rot45" in card["preprocess"]["features"]
    state = json.loads((xgb_run / "preprocess.json").read_text())
    assert state["target"] == "price" and [c["name"] for c in state["columns"]] == [
        "households", "total_rooms", "age", "latitude", "longitude", "coast"]  # the id column was dropped
    assert state["columns"][-1]["categories"] == ["<1H OCEAN", "INLAND", "NEAR OCEAN"]
    (split,) = state["splits"]
    assert split["models"] == card["weights"] and "coef" in split["features"]["impute"]["age"]
    assert split["features"]["engineer"]["coordinates"] == ["latitude", "longitude"]
    rows = _rows(xgb_run / "predictions.csv")
    assert list(rows[0]) == ["row", "price", "predicted_price"] and len(rows) == 60

    folds = json.loads((xgb_folds_run / "model.json").read_text())
    assert folds["weights"] == ["xgb_fold0_model0.json", "xgb_fold1_model0.json"]
    assert folds["selected"].startswith("2 fold models") and folds["classes"] == ["high", "low", "mid"]
    rows = _rows(xgb_folds_run / "predictions.csv")
    assert list(rows[0]) == ["row", "fold", "label", "predicted_label", "prob_high", "prob_low", "prob_mid"]
    assert sorted(int(r["row"]) for r in rows) == list(range(300))  # each row once, by the fold that tests it

    mlp = json.loads((mlp_run / "model.json").read_text())
    assert mlp["weights"] == ["model.safetensors"] and mlp["selected"] == "best-validation state"
    (split,) = json.loads((mlp_run / "preprocess.json").read_text())["splits"]
    assert split["network"]["model"] == "mlp" and split["encoding"]["categories"]["code"] == ["0", "1", "2", "3", "4"]
    assert json.loads((ft_folds_run / "model.json").read_text())["weights"] == [
        "model_fold0.safetensors", "model_fold1.safetensors"]
    assert not [p for r in (xgb_run, mlp_run) for p in r.iterdir() if p.suffix in (".pkl", ".pickle")]


@pytest.mark.parametrize("run", ["xgb_run", "xgb_folds_run", "mlp_run", "ft_folds_run"])
def test_predict_on_the_run_test_split_reproduces_its_metrics_and_rows(run, request):
    run_dir = request.getfixturevalue(run)
    result = roundtrip(run_dir)  # every test_/val_ metric (fold means and stds, the bootstrap interval) and row
    summary = json.loads((run_dir / "summary.json").read_text())["metrics"]
    metric = "test_rmse" if "test_rmse" in summary else "test_accuracy"
    assert result.metrics[metric] == summary[metric] and f"{metric}_ci_low" in result.metrics


@pytest.mark.parametrize("run, source, target", [("xgb_run", "houses.csv", "price"),
                                                 ("mlp_run", "classes.csv", "label")])
def test_new_tables_get_the_predictions_the_run_gave_its_own_rows(run, source, target, request, tables, tmp_path):
    """The run's test rows, given as a new table (target dropped, columns reordered, an extra column, as CSV, TSV
    and parquet), get the run's own predictions exactly: same columns, imputation, features and model."""
    from recipe_zoo import load
    from recipe_zoo.cli import main

    run_dir = request.getfixturevalue(run)
    saved = pd.read_csv(run_dir / "predictions.csv")
    rows = pd.read_csv(tables / source).iloc[saved["row"]]
    new = rows.drop(columns=[target]).assign(note="extra")[[*rows.columns[::-1][1:], "note"]]
    columns = [c for c in saved.columns if c.startswith(("predicted_", "prob_"))]
    for path in (tmp_path / "new.csv", tmp_path / "new.tsv", tmp_path / "new.parquet"):
        if path.suffix == ".parquet":
            new.to_parquet(path)
        else:
            new.to_csv(path, sep="\t" if path.suffix == ".tsv" else ",", index=False)
        out = tmp_path / f"out_{path.suffix[1:]}.csv"
        assert main(["predict", str(run_dir), f"data={path}", "--out", str(out), "--device", "cpu"]) == 0
        got = pd.read_csv(out)
        assert list(got.columns) == [*new.columns, *columns] and (got["note"] == "extra").all()
        for c in columns:
            assert (got[c].to_numpy() == saved[c].to_numpy()).all(), (path.name, c)
    labelled = tmp_path / "labelled.csv"
    rows.to_csv(labelled, index=False)
    result = load(run_dir, device="cpu").predict(data=str(labelled))
    summary = json.loads((run_dir / "summary.json").read_text())["metrics"]
    shared = [k for k in result.metrics if f"test_{k}" in summary]
    assert shared and all(result.metrics[k] == pytest.approx(summary[f"test_{k}"], abs=1e-9) for k in shared)
    assert result.arrays["prediction"].shape[0] == len(rows)


def test_unseen_categories_and_gaps_are_read_as_training_read_them(mlp_run, xgb_folds_run, tmp_path, capfd):
    """An unseen colour is missing (logged); a gap, stripped spaces, 'True'/'False' and an integer category read as
    3.0 because of a gap: each as training read it. The fold models are averaged for new rows."""
    from recipe_zoo import load

    path = tmp_path / "odd.csv"
    path.write_text("x1,x2,colour,flag,code\n0.5,1.0,purple,True,3\n0.5,1.0,,True,3\n0.5,1.0, red ,False,\n"
                    ",-1,red,False,1\n")
    capfd.readouterr()
    for run_dir in (mlp_run, xgb_folds_run):
        result = load(run_dir, device="cpu").predict(data=str(path), probabilities=False)
        assert [list(r)[-1] for r in result.rows] == ["predicted_label"] * 4
        assert {r["predicted_label"] for r in result.rows} <= {"high", "low", "mid"} and not result.metrics
        assert result.rows[0]["predicted_label"] == result.rows[1]["predicted_label"]  # unseen = missing
        assert result.rows[2]["colour"] == " red " and result.rows[0]["code"] == 3.0  # the rows as read
    err = capfd.readouterr().err
    assert "column 'colour': 1 values the training table never had ('purple'): read as missing" in err
    from recipe_zoo.recipes.tabular import inference

    col = {"name": "code", "categories": ["1", "3"], "strip": False}
    assert inference.as_categories(pd.Series([3.0, None, 1.0]), col).tolist()[::2] == ["3", "1"]
    col = {"name": "colour", "categories": ["red"], "strip": True}
    assert inference.as_categories(pd.Series([" red", "", "blue"]), col).isna().tolist() == [False, True, True]


@pytest.mark.parametrize("content, needles", [
    ("households,total_rooms,latitude,longitude,coast\n1,2,3,4,INLAND\n", ("bad.csv: no column 'age'",)),
    ("households,total_rooms,age,latitude,longitude,coast\n1,2,3,4,5,INLAND\n1,2,old,4,5,INLAND\n",
     ("bad.csv row 3: column 'age' is 'old'",)),
    ("households,total_rooms,age,latitude,longitude,coast\n1,2,3,4,5,INLAND\n1,inf,3,4,5,INLAND\n",
     ("bad.csv row 3: column 'total_rooms' is inf, not a finite",)),
    ("", ("bad.csv: empty file",)),
    (None, ("data=", "bad.csv: no such file")),
])
def test_bad_tables_are_one_line(xgb_run, tmp_path, capfd, content, needles):
    path = tmp_path / "bad.csv"
    if content is not None:
        path.write_text(content)
    predict_bad(capfd, xgb_run, f"data={path}", needles=needles)


def test_other_bad_predict_input(xgb_run, tmp_path, capfd):
    (tmp_path / "t.json").write_text("{}")
    predict_bad(capfd, xgb_run, f"data={tmp_path / 't.json'}", needles=("expected a .csv, .tsv or .parquet",))
    predict_bad(capfd, xgb_run, "probabilty=false", needles=("unknown key 'probabilty'", "probabilities"))
    (xgb_run / "xgb_model1.json").rename(tmp_path / "gone.json")
    try:
        predict_bad(capfd, xgb_run, needles=("xgb_model1.json: not found",))
    finally:
        (tmp_path / "gone.json").rename(xgb_run / "xgb_model1.json")


def test_xgboost_json_export_loads_in_xgboost(xgb_run, tmp_path):
    """Each exported booster loads with xgboost.Booster().load_model; its best_iteration, the exported
    preprocess.json's features and the bagged mean give the run's test predictions."""
    import xgboost as xgb

    from recipe_zoo import load
    from recipe_zoo.predict import export
    from recipe_zoo.recipes.tabular import features, inference

    files = export(load(xgb_run, device="cpu"), "xgboost-json", tmp_path / "x")
    assert sorted(p.name for p in files) == ["preprocess.json", "xgb_model0.json", "xgb_model1.json"]
    state = json.loads((tmp_path / "x" / "preprocess.json").read_text())
    saved = pd.read_csv(xgb_run / "predictions.csv")
    frame = pd.read_csv(json.loads((xgb_run / "config.json").read_text())["config"]["data"]).iloc[saved["row"]]
    (split,) = state["splits"]
    X = features.apply_features(inference.conform(frame, state["columns"], "test"), split["features"])
    preds = []
    for name in split["models"]:
        booster = xgb.Booster()
        booster.load_model(tmp_path / "x" / name)
        dm = xgb.DMatrix(X, enable_categorical=True)
        preds.append(booster.predict(dm, iteration_range=(0, booster.best_iteration + 1)))
    mean = np.mean(preds, axis=0)
    assert not split["log_target"] and np.allclose(mean, saved["predicted_price"], rtol=1e-6)


def _onnx_matches_torch(run_dir, tmp_path, rows):
    import onnxruntime as ort

    from recipe_zoo import load
    from recipe_zoo.predict import export
    from recipe_zoo.recipes.tabular import features, inference, models
    from recipe_zoo.recipes.tabular.mlp import load_network

    model = load(run_dir, device="cpu")
    files = export(model, "onnx", tmp_path / "onnx")
    state = json.loads((tmp_path / "onnx" / "preprocess.json").read_text())
    X = inference.conform(rows, state["columns"], "rows")
    for split, path in zip(state["splits"], [p for p in files if p.suffix == ".onnx"]):
        enc = models.encode(features.apply_features(X, split["features"]), split["encoding"])
        with torch.no_grad():
            want = load_network(model.open(tmp_path / "x.csv"), split, "cpu")(enc.num, enc.cat).numpy()
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {"num": enc.num.numpy(), "cat": enc.cat.numpy()}
        got = session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})[0]
        assert got.shape == want.shape == (64, split["network"]["out"])
        assert np.abs(got - want).max() <= 1e-4, (path.name, np.abs(got - want).max())
    return files


def test_onnx_export_matches_torch_on_64_rows(mlp_run, tables, tmp_path):
    rows = pd.read_csv(tables / "classes.csv").sample(64, random_state=0)
    files = _onnx_matches_torch(mlp_run, tmp_path, rows)
    assert sorted(p.name for p in files) == ["model.onnx", "preprocess.json"]


def test_onnx_export_of_fold_transformers(ft_folds_run, tables, tmp_path):
    rows = pd.read_csv(tables / "houses.csv").sample(64, random_state=0)
    files = _onnx_matches_torch(ft_folds_run, tmp_path, rows)
    assert sorted(p.name for p in files) == ["model_fold0.onnx", "model_fold1.onnx", "preprocess.json"]


def test_safetensors_export_carries_what_predict_needs(mlp_run, tmp_path):
    from safetensors.torch import load_file

    from recipe_zoo import load
    from recipe_zoo.predict import export

    files = export(load(mlp_run, device="cpu"), "safetensors", tmp_path / "st")
    assert sorted(p.name for p in files) == ["config.json", "model.json", "model.safetensors", "preprocess.json"]
    weights = load_file(tmp_path / "st" / "model.safetensors")
    assert "head.weight" in weights and "embeddings.0.weight" in weights


def test_imputation_plan_fills_gaps_in_new_rows_as_training_would(monkeypatch):
    """Every column complete in training gets its ridge (saved as JSON, applied bit for bit the same); past
    RIDGE_COLUMNS only the columns training itself fills do, the others fall back to the training median."""
    from recipe_zoo.recipes.tabular import features

    rng = np.random.default_rng(0)
    rooms = rng.integers(100, 5000, 300).astype(np.float32)
    frame = pd.DataFrame({"rooms": rooms, "bedrooms": np.round(rooms / 5), "age": rng.integers(1, 50, 300)})
    plan = json.loads(json.dumps(features.imputation_plan(frame, np.arange(200))))
    assert set(plan) == {"rooms", "bedrooms", "age"} and all("coef" in e and e["positive"] for e in plan.values())
    new = frame.iloc[:3].copy()
    new["bedrooms"] = np.nan
    filled = features.impute(new, plan)
    assert np.allclose(filled["bedrooms"], frame["bedrooms"].iloc[:3], rtol=0.1) and new["bedrooms"].isna().all()
    monkeypatch.setattr(features, "RIDGE_COLUMNS", 2)
    wide = features.imputation_plan(frame, np.arange(200))
    assert not any("coef" in e for e in wide.values())
    assert (features.impute(new, wide)["bedrooms"] == np.float32(np.expm1(wide["bedrooms"]["median"]))).all()
