"""contrastive: a finished run's backbone applied to new images (embeddings as .npy with an index CSV), its own test
queries embedded and scored again (embeddings within 1e-5 of the run's, kNN and probe metrics within 1e-6), bad
inputs in one line, and the timm export."""
import csv
import json

import numpy as np
import pytest
import torch

from conftest import predict_bad, roundtrip, train_in_process


def _train(out, recipe, *args, budget="5steps"):
    return train_in_process(out, recipe, "width=8", "proj_hidden=32", *args, budget=budget)


def _folder(root, classes=("cat", "dog", "owl"), n=6, size=12):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, cls in enumerate(classes):
        (root / cls).mkdir(parents=True)
        for i in range(n):
            pixels = np.clip(rng.normal(70 * c + 20, 25, (size, size + 4, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / cls / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    # fp32: its kNN rows are compared exactly, and a bf16 re-embedding can flip a near-tie (a neighbour at 1e-3)
    return _train(tmp_path_factory.mktemp("digits"), "contrastive/simclr", "precision=fp32")


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    """BYOL on an own folder of class folders (RGB, 12 px): test = 30% of its images, hash-chosen."""
    tmp = tmp_path_factory.mktemp("folder")
    return _train(tmp, "contrastive/byol", f"data={_folder(tmp / 'photos')}", "image_size=12", "batch_size=8",
                  "test_fraction=0.3")


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_the_run_saves_a_card_its_test_embeddings_and_predictions(digits_run):
    card = json.loads((digits_run / "model.json").read_text())
    assert card["format_version"] == 1 and card["recipe"] == "contrastive/simclr" and card["task"] == "embedding"
    assert card["classes"] == [str(i) for i in range(10)] and card["selected"] == "final"
    assert card["architecture"] == {"model": "zoo-net", "width": 8, "feature_dim": 32, "channels_last": True}
    pre = card["preprocess"]
    assert pre["image_size"] == 8 and pre["channels"] == 1 and len(pre["mean"]) == len(pre["std"]) == 1
    assert card["evaluation"]["knn_k"] == 200
    rows = _rows(digits_run / "predictions.csv")
    embeddings = np.load(digits_run / "embeddings.npy")
    assert embeddings.shape == (360, 32) and embeddings.dtype == np.float32 and len(rows) == 360
    assert list(rows[0]) == ["file", "row", "label", "knn_prediction"] and rows[5]["row"] == "5"
    accuracy = np.mean([r["label"] == r["knn_prediction"] for r in rows])
    summary = json.loads((digits_run / "summary.json").read_text())["metrics"]
    assert accuracy == pytest.approx(summary["test_knn_accuracy"], abs=1e-6)  # the metric is float32


@pytest.mark.parametrize("run", ["digits_run", "folder_run"])
def test_predict_on_the_run_test_split_reproduces_its_embeddings_and_metrics(run, request):
    run_dir = request.getfixturevalue(run)
    result = roundtrip(run_dir, tol=1e-6)  # rows (file, row, label, kNN prediction) exactly; metrics within 1e-6
    assert {"test_knn_accuracy", "test_knn_macro_f1", "test_linear_accuracy"} <= set(result.metrics)
    saved = np.load(run_dir / "embeddings.npy")
    assert np.abs(result.arrays["embeddings"] - saved).max() <= 1e-5
    (path,) = result.files
    assert path.name == "embeddings.npy" and np.array_equal(np.load(path), result.arrays["embeddings"])


def test_new_images_give_the_embeddings_the_run_gave_them(folder_run, tmp_path, capfd):
    """The folder's test images, given as new data (read flat, recursively, other files skipped), are embedded
    as the run embedded them; one file works too; ``normalize`` gives unit vectors."""
    from recipe_zoo import load
    from recipe_zoo.cli import main

    import shutil

    photos = tmp_path / "photos"  # a copy of the run's own folder, with a file that is no image
    shutil.copytree(json.loads((folder_run / "config.json").read_text())["config"]["data"], photos)
    (photos / "notes.txt").write_text("not an image")
    out = tmp_path / "emb.csv"
    assert main(["predict", str(folder_run), f"data={photos}", "--out", str(out), "--device", "cpu"]) == 0
    text = capfd.readouterr()
    assert "18 predictions" in text.out and "skipped 1 non-image files" in text.err
    rows = _rows(out)
    assert list(rows[0]) == ["file", "row"] and rows[0] == {"file": "cat/0.png", "row": "0"}
    embeddings = np.load(tmp_path / "emb" / "embeddings.npy")
    assert embeddings.shape == (18, 32) and embeddings.dtype == np.float32
    where = {r["file"]: int(r["row"]) for r in rows}
    run_rows = _rows(folder_run / "predictions.csv")
    run_embeddings = np.load(folder_run / "embeddings.npy")
    assert run_rows and all(r["file"] in where for r in run_rows)
    for r in run_rows:
        assert np.abs(embeddings[where[r["file"]]] - run_embeddings[int(r["row"])]).max() <= 1e-5, r["file"]

    model = load(folder_run, device="cpu")
    one = model.predict(data=str(photos / "dog" / "3.png"), normalize=True)
    assert one.rows == [{"file": "3.png", "row": 0}] and not one.metrics
    assert np.allclose(np.linalg.norm(one.arrays["embeddings"], axis=1), 1, atol=1e-6)
    direction = embeddings[where["dog/3.png"]] / np.linalg.norm(embeddings[where["dog/3.png"]])
    assert np.abs(one.arrays["embeddings"][0] - direction).max() <= 1e-5


def test_predict_bad_inputs_are_one_line(digits_run, folder_run, tmp_path, capfd):
    from PIL import Image

    rgb = tmp_path / "rgb.png"
    Image.new("RGB", (8, 8), (1, 2, 3)).save(rgb)
    predict_bad(capfd, digits_run, f"data={rgb}", needles=(str(rgb), "3 channels", "trained on 1"))
    predict_bad(capfd, folder_run, f"data={tmp_path / 'nowhere'}", needles=("nowhere", "no such file"))
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    predict_bad(capfd, folder_run, f"data={notes}", needles=("notes.txt", "not an image file"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.png").write_bytes(b"not a png")
    predict_bad(capfd, folder_run, f"data={broken}", needles=("x.png", "cannot decode"))
    predict_bad(capfd, folder_run, "normalise=true", needles=("unknown key 'normalise'", "normalize"))
    predict_bad(capfd, folder_run, "batch_size=-1", needles=("batch_size",))


def test_exports(digits_run, tmp_path, capfd):
    from recipe_zoo.cli import main
    from recipe_zoo.recipes.contrastive.models import load_backbone
    from recipe_zoo.recipes.backbones import ZooNet

    assert main(["export", str(digits_run), "--format", "safetensors", "--out", str(tmp_path / "st")]) == 0
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == [".zoo-written", "config.json", "model.json",
                                                           "model.safetensors"]
    card = json.loads((tmp_path / "st" / "model.json").read_text())
    backbone = load_backbone(card, tmp_path / "st" / "model.safetensors")
    assert isinstance(backbone, ZooNet) and backbone(torch.zeros(2, 1, 8, 8)).shape == (2, 32)
    capfd.readouterr()
    assert main(["export", str(digits_run), "--format", "timm"]) == 2
    assert "zoo's own network" in capfd.readouterr().err
    assert main(["export", str(digits_run), "--format", "onnx"]) == 2
    assert "exports safetensors, timm" in capfd.readouterr().err


@pytest.mark.slow
def test_a_timm_backbone_exports_a_folder_timm_loads(tmp_path):
    """A timm backbone above 64 px (timm's own stem): roundtrip, then the timm folder gives the same embeddings."""
    import timm

    from recipe_zoo import load
    from recipe_zoo.predict import export
    from recipe_zoo.recipes.contrastive.models import load_backbone

    run_dir = _train(tmp_path, "contrastive/simclr", f"data={_folder(tmp_path / 'photos', size=72)}",
                     "model=resnet10t", "image_size=72", "batch_size=8", "test_fraction=0.3", budget="2steps")
    roundtrip(run_dir)
    model = load(run_dir, device="cpu")
    export(model, "timm", tmp_path / "timm")
    loaded = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval()
    assert loaded.pretrained_cfg["mean"] == model.card["preprocess"]["mean"]
    x = torch.rand(4, 3, 72, 72)
    with torch.no_grad():
        assert torch.allclose(loaded(x), load_backbone(model.card, run_dir / "model.safetensors")(x), atol=1e-5)
