"""vision: a finished run applied to new images (zoo predict), its own test split scored again, and exports."""
import json

import numpy as np
import pytest
import torch

from conftest import predict_bad, roundtrip, train_in_process


def _train(out, *args, budget="4steps"):
    return train_in_process(out, "vision/resnet", "width=8", *args, budget=budget)


def _folder(root, classes=("cat", "dog", "owl"), n=6, size=12, mode="RGB"):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, cls in enumerate(classes):
        (root / cls).mkdir(parents=True)
        for i in range(n):
            pixels = np.clip(rng.normal(70 * c + 20, 25, (size, size + 4, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).convert(mode).save(root / cls / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("folder")
    return _train(tmp, f"data={_folder(tmp / 'photos')}", "test_fraction=0.3")


def test_the_run_saves_a_card_and_its_test_predictions(digits_run):
    card = json.loads((digits_run / "model.json").read_text())
    assert card["format_version"] == 1 and card["recipe"] == "vision/resnet" and card["task"] == "classification"
    assert card["classes"] == [str(i) for i in range(10)] and card["preprocess"]["channels"] == 1
    assert card["evaluation"] == {"tta": 2, "flip": False}
    assert (digits_run / "model.safetensors").is_file() and (digits_run / "predictions.csv").is_file()


@pytest.mark.parametrize("run", ["digits_run", "folder_run"])
def test_predict_on_the_run_test_split_reproduces_its_metrics(run, request):
    result = roundtrip(request.getfixturevalue(run))
    assert {"test_accuracy", "test_macro_f1", "test_loss"} <= set(result.metrics)
    assert np.allclose(result.arrays["probabilities"].sum(1), 1, atol=1e-5)


def test_predict_new_images_flat_labelled_and_one_file(folder_run, tmp_path, capfd):
    from recipe_zoo import load
    from recipe_zoo.cli import main

    model = load(folder_run, device="cpu")
    labelled = _folder(tmp_path / "new", n=2)
    scored = model.predict(data=str(labelled), tta=0)
    assert len(scored.rows) == 6 and set(scored.metrics) == {"accuracy", "macro_f1", "loss"}
    assert scored.rows[0]["file"] == "cat/0.png" and scored.rows[0]["label"] == "cat"
    flat = tmp_path / "flat"
    flat.mkdir()
    for i, path in enumerate(sorted(labelled.rglob("*.png"))):
        path.rename(flat / f"{i}.png")
    (flat / "notes.txt").write_text("not an image")
    out = tmp_path / "preds.csv"
    assert main(["predict", str(folder_run), f"data={flat}", "--out", str(out), "--device", "cpu"]) == 0
    text = capfd.readouterr()
    assert "6 predictions" in text.out and "skipped 1 non-image files" in text.err
    lines = out.read_text().splitlines()
    assert lines[0] == "file,predicted,p_cat,p_dog,p_owl" and len(lines) == 7
    one = model.predict(data=str(flat / "0.png"))
    assert len(one.rows) == 1 and one.rows[0]["file"] == "0.png" and not one.metrics


def test_predict_bad_inputs_are_one_line(digits_run, folder_run, tmp_path, capfd):
    from PIL import Image

    rgb = tmp_path / "rgb.png"
    Image.new("RGB", (8, 8), (1, 2, 3)).save(rgb)
    predict_bad(capfd, digits_run, f"data={rgb}", needles=(str(rgb), "3 channels", "trained on 1"))
    predict_bad(capfd, folder_run, f"data={tmp_path / 'nowhere'}", needles=("nowhere", "no such file"))
    (tmp_path / "empty").mkdir()
    predict_bad(capfd, folder_run, f"data={tmp_path / 'empty'}", needles=("empty", "no images"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.png").write_bytes(b"not a png")
    predict_bad(capfd, folder_run, f"data={broken}", needles=("x.png", "cannot decode"))
    predict_bad(capfd, folder_run, "tta=7", needles=("tta",))
    predict_bad(capfd, folder_run, "dta=x", needles=("unknown key 'dta'", "did you mean 'data'"))
    predict_bad(capfd, tmp_path, needles=("model.json", "not found"))


def test_a_card_of_another_format_version_is_refused(digits_run, tmp_path, capfd):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(digits_run, copy)
    card = json.loads((copy / "model.json").read_text())
    (copy / "model.json").write_text(json.dumps(card | {"format_version": 99}))
    predict_bad(capfd, copy, needles=("format_version 99", "reads format_version 1"))
    (copy / "model.json").write_text(json.dumps(card))
    (copy / "model.safetensors").unlink()
    predict_bad(capfd, copy, needles=("model.safetensors", "not found"))


def test_export_onnx_agrees_with_torch(folder_run, tmp_path):
    import onnxruntime

    from recipe_zoo import load
    from recipe_zoo.predict import export
    from recipe_zoo.recipes.vision.models import Normalized, load_model

    model = load(folder_run, device="cpu")
    onnx_file, info = export(model, "onnx", tmp_path / "onnx")
    pre = json.loads(info.read_text())
    size = pre["image_size"]
    x = torch.rand(64, pre["channels"], size, size, generator=torch.Generator().manual_seed(0))
    session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {"images": x.numpy()})[0]
    net = Normalized(load_model(model.card, folder_run), pre["mean"], pre["std"]).eval()
    with torch.no_grad():
        want = net(x).numpy()
    assert got.shape == (64, 3) and np.abs(got - want).max() < 1e-4


def test_export_formats_and_refusals(digits_run, tmp_path, capfd):
    from recipe_zoo.cli import main

    assert main(["export", str(digits_run), "--format", "safetensors", "--out", str(tmp_path / "st")]) == 0
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == [".zoo-written", "config.json", "model.json",
                                                           "model.safetensors"]
    capfd.readouterr()
    assert main(["export", str(digits_run), "--format", "timm"]) == 2
    assert "zoo's own network" in capfd.readouterr().err
    assert main(["export", str(digits_run), "--format", "tflite"]) == 2
    assert "exports safetensors, onnx, timm" in capfd.readouterr().err


@pytest.mark.slow
def test_a_timm_model_exports_to_a_folder_timm_loads(tmp_path):
    import timm

    from recipe_zoo import load
    from recipe_zoo.predict import export

    run_dir = _train(tmp_path, f"data={_folder(tmp_path / 'photos', size=72)}", "model=resnet10t",
                     "image_size=96", "batch_size=8", budget="2steps")
    roundtrip(run_dir)
    model = load(run_dir, device="cpu")
    export(model, "timm", tmp_path / "timm")
    loaded = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval()
    assert loaded.pretrained_cfg["label_names"] == ["cat", "dog", "owl"]
    from recipe_zoo.recipes.vision.models import load_model

    x = torch.rand(4, 3, 96, 96)
    with torch.no_grad():
        assert torch.allclose(loaded(x), load_model(model.card, run_dir)(x), atol=1e-5)
