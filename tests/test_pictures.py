"""The pictures a finished run draws (zoo/pictures.py, recipes/medical/overlays.py) and ``zoo compare --plot``: each
drawn from a real run or a predictions table in a recipe's own columns, not blank, its counts right; a picture that
cannot be drawn is a warning, never a failed run; a bad --plot path is one line, exit 2."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_ok, summary_block, zoo_in_process
from recipe_zoo import pictures


def not_blank(path: Path) -> None:
    from PIL import Image

    assert path.is_file(), path
    pixels = np.asarray(Image.open(path).convert("RGB"))
    assert pixels.shape[0] > 200 and pixels.shape[1] > 200, pixels.shape
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20, f"{path}: (nearly) one colour"


def write_table(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.fixture(scope="module")
def wine_runs(tmp_path_factory):
    """Two tiny tabular/mlp runs on the bundled wine classes that differ in their learning rate."""
    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("wine")
    mp.setenv("ZOO_RUNS", str(tmp / "runs"))
    mp.setenv("ZOO_PLOTS", "1")
    try:
        dirs = [Path(run_ok("tabular/mlp", "data=wine", "hidden=16", f"lr={lr}", budget="12steps")[0]["run_dir"])
                for lr in (0.001, 0.01)]
    finally:
        mp.undo()
    return dirs


def test_a_classifier_s_run_draws_its_confusion_matrix_and_its_counts_are_its_accuracy(wine_runs):
    run = wine_runs[0]
    not_blank(run / "confusion.png")
    not_blank(run / "curves.png")
    assert not (run / "pred_vs_true.png").exists()
    columns, rows = pictures.read_table(run / "predictions.csv")
    card = json.loads((run / "model.json").read_text())
    [panel] = pictures.panels(columns, card)
    truth, pred = pictures.pairs(rows, panel)
    matrix = pictures.confusion_matrix(truth, pred, pictures.class_order(truth, pred, card["classes"]))
    summary = json.loads((run / "summary.json").read_text())
    assert matrix.shape == (3, 3) and matrix.sum() == len(rows)
    assert np.trace(matrix) / matrix.sum() == pytest.approx(summary["metrics"]["test_accuracy"])


def test_confusion_counts():
    classes = ["cat", "dog", "fox"]
    m = pictures.confusion_matrix(["cat", "dog", "cat", "fox", "dog"], ["cat", "cat", "cat", "fox", "fox"], classes)
    assert m.tolist() == [[2, 0, 0], [1, 0, 1], [0, 0, 1]]  # row: the true class, column: the predicted one
    assert pictures.class_order(["10", "9"], ["2"]) == ["2", "9", "10"]  # numbers by value, with no card


def test_each_domain_s_columns_are_found():
    def found(columns, card=None):
        return [(p.truth, p.pred, p.kind) for p in pictures.panels(columns, card or {})]

    assert found(["file", "label", "predicted", "p_cat", "p_dog"]) == [("label", "predicted", "classes")]
    assert found(["file", "row", "label", "knn_prediction"]) == [("label", "knn_prediction", "classes")]
    tabular = ["row", "price", "predicted_price"]
    assert found(tabular, {"task": "regression"}) == [("price", "predicted_price", "values")]
    assert found(["row", "y", "predicted_y", "prob_y", "prob_n"], {"task": "classification"}) == [
        ("y", "predicted_y", "classes")]  # the class probabilities are no targets, even a class named as one
    assert found(["smiles", "a", "b", "pred_a", "pred_b"]) == [("a", "pred_a", "values"), ("b", "pred_b", "values")]
    assert found(["smiles", "a", "prob_a"]) == [("a", "prob_a", "binary")]
    assert found(["row", "id", "target", "prediction"], {"task": "regression"}) == [("target", "prediction", "values")]
    assert found(["row", "mutant", "target", "score"], {"task": "zero-shot"}) == [("target", "score", "ranks")]
    assert found(["file", "mask", "foreground_fraction", "dice"]) == []  # medical draws its own


def test_binary_probabilities_are_read_at_one_half(tmp_path):
    rows = [{"smiles": "C", "toxic": "1.0", "prob_toxic": "0.9"}, {"smiles": "CC", "toxic": "0.0", "prob_toxic": "0.6"},
            {"smiles": "CCC", "toxic": "0.0", "prob_toxic": "0.2"}, {"smiles": "O", "toxic": "", "prob_toxic": "0.7"}]
    [panel] = pictures.panels(list(rows[0]), {"task": "classification"})
    truth, pred = pictures.pairs(rows, panel)  # the unmeasured molecule left out
    assert pictures.confusion_matrix(truth, pred, ["0", "1"]).tolist() == [[1, 1], [0, 1]]
    write_table(tmp_path / "predictions.csv", rows)
    assert pictures.draw(tmp_path, print, "molecules") == [tmp_path / "confusion.png"]
    not_blank(tmp_path / "confusion.png")


def test_regression_targets_each_get_a_panel_of_predicted_against_true(tmp_path):
    rng = np.random.default_rng(0)
    logp, tpsa = rng.normal(2, 1, 60), rng.uniform(0, 80, 60)
    rows = [{"smiles": "C" * (i + 1), "logp": a, "tpsa": "" if i == 3 else b, "pred_logp": a + rng.normal(0, 0.3),
             "pred_tpsa": b + rng.normal(0, 5)} for i, (a, b) in enumerate(zip(logp, tpsa))]
    write_table(tmp_path / "predictions.csv", rows)
    (tmp_path / "model.json").write_text(json.dumps({"task": "regression"}))
    assert pictures.draw(tmp_path, print, "molecules/dmpnn") == [tmp_path / "pred_vs_true.png"]
    not_blank(tmp_path / "pred_vs_true.png")
    panel = pictures.panels(list(rows[0]), {"task": "regression"})[1]
    assert len(pictures.pairs(rows, panel)[0]) == 59  # the blank target left out


def test_a_picture_that_cannot_be_drawn_is_a_warning_and_the_run_is_ok(tmp_path, monkeypatch):
    """A recipe file whose run leaves a folder where confusion.png goes: writing the picture fails for real."""
    path = tmp_path / "mytask.py"
    path.write_text('''
from dataclasses import dataclass
from recipe_zoo.core import artifact
from recipe_zoo.core.api import recipe


@dataclass
class Config:
    classes: int = 2  # how many


@recipe("mine/pictures", config=Config, benchmark="synthetic", metric="test_accuracy", budget="1steps")
def train(cfg, run):
    artifact.write_predictions(run.dir, [{"label": "a", "predicted": "a"}, {"label": "b", "predicted": "a"}])
    (run.dir / "confusion.png").mkdir()
    return {"test_accuracy": 0.5}
''')
    monkeypatch.setenv("ZOO_PLOTS", "1")
    r = zoo_in_process("run", path, "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    block = summary_block(r.stdout)
    assert block["status"] == "ok"
    log = (Path(block["run_dir"]) / "log.txt").read_text()
    assert "warning: could not draw confusion.png: IsADirectoryError" in log


def test_no_pictures_with_zoo_plots_0(tmp_path):
    """conftest sets ZOO_PLOTS=0 for every test: a run draws nothing."""
    summary, _ = run_ok("tabular/mlp", "data=wine", "hidden=8", budget="2steps")
    run = Path(summary["run_dir"])
    assert (run / "predictions.csv").is_file()
    assert not any(run.glob("*.png"))


def scenes(n: int, size: int = 64) -> list:
    """``n`` noisy 2-D cases as medical/data.py reads them (image (1, X, Y), label (1, X, Y)): a disc of class 1, a
    square of class 2."""
    from recipe_zoo.recipes.medical.data import RawCase

    rng = np.random.default_rng(0)
    x, y = np.mgrid[:size, :size]
    cases = []
    for i in range(n):
        label = np.zeros((size, size), np.uint8)
        cx, cy = rng.integers(16, size - 16, 2)
        label[(x - cx) ** 2 + (y - cy) ** 2 < rng.integers(40, 140)] = 1
        label[4:14, 40 + i % 8:52 + i % 8] = 2
        image = label * 0.4 + rng.normal(0, 0.15, label.shape)
        cases.append(RawCase(f"case{i}", image[None].astype(np.float32), label[None], (1.0, 1.0), key=f"case{i}.png"))
    return cases


def test_medical_cases_show_the_worst_and_best_by_dice(tmp_path):
    from recipe_zoo.recipes.medical.data import SegData
    from recipe_zoo.recipes.medical.masks import mask_name, save_mask
    from recipe_zoo.recipes.medical.overlays import chosen, plot_cases, read_mask

    data = SegData(scenes(8), ["background", "disc", "square"], "scenes", values=[0, 128, 255])
    rows = []
    for i, case in enumerate(data.cases):  # the true masks, a band of each wiped out: Dice falls with i
        pred = case.label[0].copy()
        pred[: i * 6] = 0
        name = mask_name(case.key, case.source, 2)
        save_mask(tmp_path / "predictions" / name, pred, data.values, case.source, case.spacing)
        assert (read_mask(tmp_path / "predictions" / name, data.values) == pred).all()  # axes and values back
        rows.append({"file": case.key, "mask": name, "dice": 1.0 - i / 10, "fold": i % 2})
    rows.append({"file": "nothing-to-find", "mask": "x.png", "dice": None})  # no foreground in its truth
    picked = chosen(rows)
    assert [w for w, _ in picked] == ["worst"] * 3 + ["best"] * 3
    assert [r["dice"] for _, r in picked] == pytest.approx([0.3, 0.4, 0.5, 1.0, 0.9, 0.8])
    assert plot_cases(tmp_path, data, rows) == tmp_path / "cases.png"
    not_blank(tmp_path / "cases.png")


def test_a_volume_is_shown_at_its_slice_with_the_most_foreground():
    from recipe_zoo.recipes.medical.overlays import view

    truth = np.zeros((8, 6, 10), np.int64)
    truth[2:4, 1:3, 3] = 1
    truth[1:7, 1:5, 7] = 2
    image, shown, pred, where = view(np.ones(truth.shape), truth, np.zeros_like(truth))
    assert where == ", slice 7/10" and (shown == truth[..., 7].T).all() and image.shape == (6, 8)
    _, _, _, where = view(np.ones(truth.shape), np.zeros_like(truth), truth)  # no true foreground: the predicted's
    assert where == ", slice 7/10"


def test_compare_plot_draws_the_runs_labelled_by_what_differs(wine_runs, tmp_path):
    out = tmp_path / "compare.png"
    r = zoo_in_process("compare", *wine_runs, "--plot", out)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout
    not_blank(out)
    from recipe_zoo import result_commands, runs

    configs = [runs.load_run_config(d) for d in wine_runs]
    assert result_commands.run_labels(configs, ["a", "b"]) == ["lr=0.001", "lr=0.01"]
    assert result_commands.run_labels(configs[:1] * 2, ["a", "b"]) == ["a", "b"]  # nothing differs: the folders


@pytest.mark.parametrize("plot", ["compare.jpg", "compare", "missing/compare.png"])
def test_a_bad_compare_plot_path_is_one_line_exit_2(wine_runs, tmp_path, plot):
    r = zoo_in_process("compare", *wine_runs, "--plot", tmp_path / plot)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--plot" in r.stderr, r.stderr
    assert not list(tmp_path.glob("*.png"))
