"""molecules: a finished run applied to a CSV of SMILES (zoo predict), its own test split scored again, invalid
SMILES kept as blank rows and counted, bad input in one line, and the XGBoost JSON export used by XGBoost alone."""
import csv
import json
import math

import numpy as np
import pytest
import torch

from conftest import predict_bad, roundtrip, train_in_process

# 90 small molecules without repeats: a substituent, a ring, a substituent
RINGS = ["c1ccccc1", "C1CCCCC1", "c1ccncc1", "C1CCOC1"]
SIDES = ["", "C", "CC", "O", "N", "Cl"]


def _molecules() -> list[str]:
    from rdkit import Chem

    seen, out = set(), []
    for ring in RINGS:
        for head in SIDES:
            for tail in SIDES:
                key = Chem.MolToSmiles(Chem.MolFromSmiles(head + ring + tail))
                if key not in seen:
                    seen.add(key)
                    out.append(head + ring + tail)
    return out


def _write(path, header, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def _logp(smiles: str) -> float:
    from rdkit import Chem
    from rdkit.Chem import Descriptors

    return round(Descriptors.MolLogP(Chem.MolFromSmiles(smiles)), 3)


def _regression_csv(path):
    return _write(path, ["smiles", "y"], [(s, _logp(s)) for s in _molecules()])


def _two_task_csv(path):
    """Two 0/1 targets, the second with gaps (masked in the loss and the metrics)."""
    return _write(path, ["smiles", "a", "b"], [(s, int(_logp(s) > 1.5), "" if i % 5 == 0 else int("O" in s))
                                               for i, s in enumerate(_molecules())])


SMALL = {"molecules/dmpnn": ["hidden=16", "ffn_hidden=16", "batch_size=16"],
         "molecules/fp-xgb": ["n_estimators=30", "bits=64"]}


def _train(out, recipe, data, *args, budget="6steps"):
    return train_in_process(out, recipe, f"data={data}", *SMALL[recipe], *args, budget=budget)


@pytest.fixture(scope="module")
def dmpnn_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dmpnn")
    return _train(tmp, "molecules/dmpnn", _regression_csv(tmp / "logp.csv"), "target=y")


@pytest.fixture(scope="module")
def xgb_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fp-xgb")
    return _train(tmp, "molecules/fp-xgb", _regression_csv(tmp / "logp.csv"), "target=y")


@pytest.fixture(scope="module")
def blend_run(tmp_path_factory):
    """A D-MPNN blended with XGBoost trees (trees=0.3) on each split."""
    tmp = tmp_path_factory.mktemp("blend")
    return _train(tmp, "molecules/dmpnn", _regression_csv(tmp / "logp.csv"), "target=y", "trees=0.3")


def _saved(run_dir) -> list[dict]:
    return list(csv.DictReader(open(run_dir / "predictions.csv")))


def test_the_runs_save_a_card_weights_and_their_test_predictions(dmpnn_run, xgb_run):
    import rdkit
    from safetensors.torch import load_file

    card = json.loads((dmpnn_run / "model.json").read_text())
    pre = card["preprocess"]
    assert card["recipe"] == "molecules/dmpnn" and card["task"] == "regression"
    assert card["selected"] == "best-val: one model"
    assert card["weights"] == ["model.safetensors"] and card["files"] == ["scalers.safetensors"]
    assert pre["rdkit"] == rdkit.__version__ and pre["targets"] == ["y"] and pre["standardize"] is True
    assert len(pre["descriptors"]) > 200 and pre["extra_dim"] == len(pre["descriptors"])
    scalers = load_file(dmpnn_run / "scalers.safetensors")
    assert scalers["split0.target_mean"].dtype == torch.float64  # as computed: float64 targets, float32 descriptors
    assert scalers["split0.descriptor_std"].dtype == torch.float32
    assert list(_saved(dmpnn_run)[0]) == ["smiles", "y", "pred_y"]
    card = json.loads((xgb_run / "model.json").read_text())
    assert card["weights"] == ["xgb.json"] and card["preprocess"]["morgan"] == {"radius": 2, "bits": 64, "counts": True}
    assert card["models"] == [{"file": "xgb.json", "fold": 0, "target": "y"}]
    assert json.loads((xgb_run / "xgb.json").read_text())["learner"]  # XGBoost's own JSON, no pickle


def test_a_blended_run_keeps_its_trees_and_their_weight_beside_the_networks(blend_run):
    card = json.loads((blend_run / "model.json").read_text())
    assert card["weights"] == ["model.safetensors"] and card["selected"].endswith(
        "blended with XGBoost trees (weights chosen on validation)")
    entry = card["blend"]
    assert entry["files"] == [["trees.json"]] and entry["morgan"] == {"radius": 2, "bits": 2048, "counts": True}
    assert len(entry["net_weights"]) == 1 and 0.0 <= entry["net_weights"][0] <= 1.0
    assert json.loads((blend_run / "trees.json").read_text())["learner"]
    assert card["files"] == ["scalers.safetensors", "trees.json"]  # the safetensors export carries the trees too
    metrics = json.loads((blend_run / "summary.json").read_text())["metrics"]
    assert metrics["net_weight"] == entry["net_weights"][0]
    log = (blend_run / "log.txt").read_text()
    assert "split 0: trees " in log and "at weight" in log and "on the D-MPNN" in log


@pytest.mark.parametrize("run", ["dmpnn_run", "xgb_run", "blend_run"])
def test_predict_on_the_run_test_split_reproduces_its_metrics(run, request):
    result = roundtrip(request.getfixturevalue(run))
    assert {"test_rmse", "test_mae", "test_r2", "val_rmse", "test_rmse_ci_low"} <= set(result.metrics)


@pytest.mark.parametrize("run", ["dmpnn_run", "xgb_run", "blend_run"])
def test_new_smiles_get_the_run_predictions_and_invalid_ones_a_blank_row(run, request, tmp_path, capfd):
    """The test molecules in another order, beside a SMILES that does not parse and an empty cell: each valid row
    gets the prediction the run made for it, the user's own columns stay, the targets give the run's metrics."""
    from recipe_zoo import load
    from recipe_zoo.cli import main

    run_dir = request.getfixturevalue(run)
    saved = {row["smiles"]: row for row in _saved(run_dir)}
    order = sorted(saved)
    rows = [(f"m{i}", s, saved[s]["y"]) for i, s in enumerate(order)]
    rows[3:3] = [("bad", "C1CC", "1.0"), ("empty", "", "")]
    new = _write(tmp_path / "new.csv", ["id", "smiles", "y"], rows)
    result = load(run_dir, device="cpu").predict(data=str(new), batch_size=4)
    assert result.dropped == 2 and len(result.rows) == len(order) + 2
    assert result.rows[3] == {"id": "bad", "smiles": "C1CC", "y": "1.0", "pred_y": None}
    assert math.isnan(result.arrays["prediction"][4, 0])
    for row in result.rows[:3] + result.rows[5:]:
        assert math.isclose(row["pred_y"], float(saved[row["smiles"]]["pred_y"]), abs_tol=1e-6)
    summary = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert math.isclose(result.metrics["rmse"], summary["test_rmse"], abs_tol=1e-6)  # the same molecules
    out = tmp_path / "out" / "preds.csv"
    capfd.readouterr()
    assert main(["predict", str(run_dir), f"data={new}", "smiles=smiles", "--out", str(out), "--device", "cpu"]) == 0
    text = capfd.readouterr()
    assert f"{len(rows)} predictions -> {out}; 2 could not be predicted (blank rows)" in text.out
    assert f"2 of {len(rows)} SMILES do not parse (rows 5, 6)" in text.err
    written = list(csv.DictReader(open(out)))
    assert list(written[0]) == ["id", "smiles", "y", "pred_y"] and written[3]["pred_y"] == written[4]["pred_y"] == ""


NO_SMILES = "name,structure\na,CCO\n"


@pytest.mark.parametrize("name, content, args, needles", [
    ("nope.csv", None, [], ["data=", "nope.csv", "no such file"]),
    ("s.csv", NO_SMILES, [], ["s.csv", "no SMILES column 'smiles'", "(columns: name, structure)", "smiles=COLUMN"]),
    ("s.csv", NO_SMILES, ["smiles=smi"], ["s.csv", "no SMILES column 'smi'"]),
    ("h.csv", "smiles,y\n", [], ["h.csv", "no rows"]),
    ("latin.csv", b"smiles\nCCO\nC\xff\n", [], ["latin.csv row 3", "0xff", "not UTF-8"]),
    ("s.csv", "smiles\nCCO\n", ["smile=smiles"], ["unknown key 'smile'", "did you mean 'smiles'"]),
    ("s.csv", "smiles\nCCO\n", ["batch_size=-1"], ["batch_size"]),
], ids=["missing-file", "no-smiles-column", "named-column-missing", "header-only", "non-utf8", "typo-key",
        "negative-batch"])
def test_bad_input_to_predict_is_one_line_exit_2(xgb_run, tmp_path, capfd, name, content, args, needles):
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        path.write_bytes(content)
    predict_bad(capfd, xgb_run, f"data={path}", *args, needles=tuple(needles))


def test_a_changed_training_table_is_not_scored_as_the_run(tmp_path, capfd):
    data = _regression_csv(tmp_path / "logp.csv")
    run_dir = _train(tmp_path, "molecules/fp-xgb", data, "target=y")
    _write(data, ["smiles", "y"], [(s, _logp(s) + 1) for s in _molecules()])  # the same molecules, other targets
    predict_bad(capfd, run_dir, needles=(str(data), "not the table this run trained on", "data=FILE"))


def test_xgboost_json_export_predicts_with_xgboost_and_rdkit_alone(xgb_run, tmp_path):
    """features.json says how to make the boosters' input; XGBoost and RDKit, without the zoo, give predict's
    numbers."""
    import xgboost as xgb
    from rdkit import Chem
    from rdkit.Chem import Descriptors, rdFingerprintGenerator
    from rdkit.Chem.MolStandardize import rdMolStandardize

    from recipe_zoo.cli import main

    out = tmp_path / "export"
    assert main(["export", str(xgb_run), "--format", "xgboost-json", "--out", str(out)]) == 0
    spec = json.loads((out / "features.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == [".zoo-written", "features.json", "xgb.json"]
    smiles = [row["smiles"] for row in _saved(xgb_run)]
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=spec["morgan"]["radius"], fpSize=spec["morgan"]["bits"])
    X = []
    for s in smiles:
        mol = rdMolStandardize.ChargeParent(Chem.MolFromSmiles(s))
        values = Descriptors.CalcMolDescriptors(mol, missingVal=float("nan"))
        X.append(np.concatenate([gen.GetCountFingerprintAsNumPy(mol), [values[n] for n in spec["descriptors"]]]))
    X = np.array(X, dtype=np.float64)
    X[~np.isfinite(X) | (np.abs(X) > 1e30)] = np.nan
    booster = xgb.Booster(model_file=str(out / spec["models"][0]["file"]))
    mine = booster.inplace_predict(X.astype(np.float32))
    np.testing.assert_allclose(mine, [float(row["pred_y"]) for row in _saved(xgb_run)], rtol=0, atol=1e-6)


def test_the_safetensors_export_holds_each_model_and_its_scalers(dmpnn_run, tmp_path):
    from safetensors.torch import load_file

    from recipe_zoo import load
    from recipe_zoo.predict import export
    from recipe_zoo.recipes.molecules import dmpnn

    model = load(dmpnn_run, device="cpu")
    written = export(model, "safetensors", tmp_path / "st")
    assert sorted(p.name for p in written) == ["config.json", "model.json", "model.safetensors", "scalers.safetensors"]
    pre = model.card["preprocess"]
    net = dmpnn.network(model.cfg, pre["atom_dim"], pre["bond_dim"], pre["extra_dim"], 1)
    net.load_state_dict(load_file(tmp_path / "st" / "model.safetensors"))  # strict: every weight, nothing else


@pytest.mark.slow
@pytest.mark.parametrize("recipe, trees", [("molecules/dmpnn", False), ("molecules/dmpnn", True),
                                           ("molecules/fp-xgb", False)], ids=["dmpnn", "dmpnn-trees", "fp-xgb"])
def test_folds_ensembles_and_two_targets_round_trip(recipe, trees, tmp_path):
    """3 folds (x an ensemble of 2 for the D-MPNN), two classification targets with gaps: each fold's models score
    its test molecules again; new molecules get every model's mean probability (with ``trees``: each fold's
    blend of its D-MPNNs and its boosters)."""
    from recipe_zoo import load

    extra = (["ensemble=2"] if recipe == "molecules/dmpnn" else []) + (["trees=0.2"] if trees else [])
    run_dir = _train(tmp_path, recipe, _two_task_csv(tmp_path / "two.csv"), "target=a,b", "folds=3", *extra)
    card = json.loads((run_dir / "model.json").read_text())
    assert len(card["weights"]) == (6 if recipe == "molecules/dmpnn" else 3 * 2) and "3 folds" in card["selected"]
    if trees:  # each fold's trees, one booster per target, and its blend weight
        assert card["blend"]["files"] == [[f"trees-fold{k}-target{t}.json" for t in (0, 1)] for k in range(3)]
        assert len(card["blend"]["net_weights"]) == 3
    result = roundtrip(run_dir)
    assert {"test_roc_auc", "test_roc_auc_std", "val_pr_auc"} <= set(result.metrics)
    assert {row["fold"] for row in _saved(run_dir)} == {"0", "1", "2"}
    new = _write(tmp_path / "new.csv", ["smiles"], [("CCO",), ("c1ccccc1CCN",), ("not a molecule",)])
    scored = load(run_dir, device="cpu").predict(data=str(new))
    assert scored.dropped == 1 and list(scored.rows[0]) == ["smiles", "prob_a", "prob_b"]
    probs = scored.arrays["prediction"][:2]
    assert ((probs > 0) & (probs < 1)).all()


def test_a_simple_run_trains_without_writing_a_card(tmp_path, monkeypatch):
    """Outside the zoo command (tests, notebooks) there is no run directory: nothing is written anywhere."""
    from recipe_zoo.core.api import SimpleRun
    from recipe_zoo.core.budget import parse_budget
    from recipe_zoo.recipes.molecules.config import FPXGBConfig
    from recipe_zoo.recipes.molecules.fp_xgb import train_fp_xgb

    monkeypatch.chdir(tmp_path)
    cfg = FPXGBConfig(data=str(_regression_csv(tmp_path / "logp.csv")), target="y", n_estimators=10, bits=32)
    metrics = train_fp_xgb(cfg, SimpleRun(budget=parse_budget("5steps"), log=lambda line: None))
    assert "test_rmse" in metrics and sorted(p.name for p in tmp_path.iterdir()) == ["cache", "logp.csv"]
