"""medical: a finished segmentation run applied to new images and volumes (zoo predict: masks in the input's
geometry), its own test cases scored again (the run's Dice within 1e-6, k folds and mirrored views included), the
bad inputs, and the safetensors export predicting the same."""
import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import predict_bad, roundtrip, train_in_process
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.medical.data import read_image
from test_medical import nifti, png_folder

TINY = ["width=4", "levels=3", "eval_every=0", "batch_size=2", "compile=false"]


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny networks: on a busy machine a second thread mostly waits (a predict took 20 s, not 0.4). Per test:
    each test leaves torch's switches as it found them (conftest checks)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _train(out: Path, *args: str, recipe: str = "medical/unet", budget: str = "3steps") -> Path:
    return train_in_process(out, recipe, *TINY, *args, budget=budget)


def _cubes(root: Path, n: int = 4, spacing=(1.0, 1.0, 5.0)) -> Path:
    """Decathlon-style CT-like volumes (5 mm slices) with a bright box as label 1."""
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        label = np.zeros((40, 40, 8), dtype=np.uint8)
        label[10 + i:25 + i, 8:24, 2:6] = 1
        image = (rng.normal(-100, 20, label.shape) + 300.0 * label).astype(np.float32)
        nifti(root / "imagesTr" / f"case{i}.nii.gz", image, spacing)
        nifti(root / "labelsTr" / f"case{i}.nii.gz", label, spacing)
    meta = {"name": "cubes", "modality": {"0": "CT"}, "labels": {"0": "background", "1": "cube"},
            "training": [{"image": f"./imagesTr/case{i}.nii.gz", "label": f"./labelsTr/case{i}.nii.gz"}
                         for i in range(n)]}
    (root / "dataset.json").write_text(json.dumps(meta))
    return root


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """24 PNG slices with masks 0/255: one train/validation/test split (4 test slices), mirrored views on."""
    tmp = tmp_path_factory.mktemp("cells")
    root = png_folder(tmp / "cells", n=24)
    return root, _train(tmp, f"data={root}", "patch=32,32", "flip_axes=0,1")


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    """4 NIfTI volumes: 2 folds (one model each), a 2-D plan across the thick slices, CT normalisation."""
    tmp = tmp_path_factory.mktemp("cubes")
    root = _cubes(tmp / "Task01_Cubes")
    return root, _train(tmp, f"data={root}", "folds=2", "patch=16,16", "tta=false")


def _rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _png(path: Path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path))


def test_the_run_saves_a_card_its_test_rows_and_masks(cells, cubes):
    root, run_dir = cells
    card = json.loads((run_dir / "model.json").read_text())
    assert card["task"] == "segmentation" and card["classes"] == ["background", "class1"]
    assert card["weights"] == ["model.safetensors"] and "final weights" in card["selected"]
    assert card["preprocess"]["label_values"] == [0, 255] and card["preprocess"]["channels"] == 1
    assert card["evaluation"]["mirror_axes"] == [0, 1] and card["evaluation"]["sliding_window"]["patch"] == [32, 32]
    assert card["models"][0]["plan"] == json.loads((run_dir / "plan.json").read_text())["plan"]
    rows = _rows(run_dir / "predictions.csv")
    split = [r["item"] for r in _rows(run_dir / "split.csv") if r["split"] == "test"]
    assert [r["file"] for r in rows] == split and list(rows[0]) == ["file", "mask", "foreground_fraction", "dice",
                                                                    "dice_class1"]
    for row in rows:
        mask = _png(run_dir / "predictions" / row["mask"])
        assert mask.shape == _png(root / row["file"]).shape and set(np.unique(mask)) <= {0, 255}
        assert np.mean(mask == 255) == pytest.approx(float(row["foreground_fraction"]))
    _, cube_dir = cubes
    card = json.loads((cube_dir / "model.json").read_text())
    assert len(card["weights"]) == 2 and card["selected"].startswith("2 fold models")
    assert card["preprocess"]["normalize"] == "ct" and card["preprocess"]["slice_axis"] == 2
    assert [r["fold"] for r in _rows(cube_dir / "predictions.csv")] == ["0", "0", "1", "1"]


def test_predict_on_the_run_test_cases_reproduces_its_metrics(cells, cubes):
    result = roundtrip(cells[1])
    assert {"test_dice", "test_miou", "test_dice_class1", "test_dice_ci_low"} <= set(result.metrics)
    assert len(result.files) == 4 and all(p.is_file() for p in result.files)
    folds = roundtrip(cubes[1])
    assert {"test_dice", "test_dice_std", "test_dice_cube"} <= set(folds.metrics)
    import nibabel as nib

    saved = nib.load(cubes[1] / "predictions" / "imagesTr" / "case0.nii.gz")
    assert saved.shape == (40, 40, 8) and np.allclose(saved.affine, np.diag([1.0, 1.0, 5.0, 1.0]))


def test_predict_new_images_labelled_flat_and_one_file(cells, tmp_path, capfd):
    from PIL import Image

    from recipe_zoo import load
    from recipe_zoo.cli import main

    root, run_dir = cells
    test = _rows(run_dir / "predictions.csv")
    new = tmp_path / "new"
    for part in ("images", "masks"):
        (new / part).mkdir(parents=True)
        for row in test:
            shutil.copy(root / part / Path(row["file"]).name, new / part)
    model = load(run_dir, device="cpu")
    scored = model.predict(data=str(new))  # the run's own test slices as new data: the same masks and Dice
    assert [r["file"] for r in scored.rows] == [Path(r["file"]).name for r in test]
    for mine, theirs in zip(scored.rows, test):
        assert mine["dice"] == pytest.approx(float(theirs["dice"]), abs=1e-6)
        assert mine["foreground_fraction"] == pytest.approx(float(theirs["foreground_fraction"]), abs=1e-9)
    assert scored.metrics["dice"] == pytest.approx(json.loads((run_dir / "summary.json").read_text())
                                                   ["metrics"]["test_dice"], abs=1e-6)  # new data: a plain name
    flat = tmp_path / "flat"
    shutil.copytree(new / "images", flat)
    (flat / "notes.txt").write_text("not an image")
    first = sorted(flat.glob("*.png"))[0]
    Image.open(first).save(flat / "copy.tif")  # TIFF: read like the PNG
    out = tmp_path / "preds.csv"
    assert main(["predict", str(run_dir), f"data={flat}", "--out", str(out), "--device", "cpu"]) == 0
    text = capfd.readouterr()
    assert "5 predictions" in text.out and "and 5 files in" in text.out and "skipped 1 files" in text.err
    rows = _rows(out)
    assert list(rows[0]) == ["file", "mask", "foreground_fraction"] and len(rows) == 5
    masks = {r["file"]: _png(tmp_path / "preds" / r["mask"]) for r in rows}
    # the same image twice: the same mask, but for a pixel whose float32 scores nearly tie, where windows batched
    # with other files' sum in another order (at most 1 in 1,000 pixels)
    assert masks["copy.tif"].shape == masks[first.name].shape == (48, 48)
    assert np.mean(masks["copy.tif"] != masks[first.name]) <= 1e-3
    one = model.predict(data=str(first), labels=str(new / "masks" / first.name), tta=0, overlap=0.25)
    assert len(one.rows) == 1 and one.rows[0]["file"] == first.name and "dice" in one.metrics
    assert not any(k.startswith("test_") for k in one.metrics)  # other data's scores never carry the run's names
    written, _ = read_image(one.files[0])  # read back as training reads a mask: the same axes and values
    assert np.array_equal(written[0], np.array([0, 255])[one.arrays["masks"][0]])


def test_predict_volumes_writes_nifti_in_their_geometry(cubes, tmp_path):
    import nibabel as nib

    from recipe_zoo import load

    root, run_dir = cubes
    folder = tmp_path / "scans"
    folder.mkdir()
    rng = np.random.default_rng(5)
    label = np.zeros((30, 36, 6), dtype=np.uint8)
    label[5:20, 10:30, 1:5] = 1
    image = (rng.normal(-100, 20, label.shape) + 300.0 * label).astype(np.float32)
    affine = np.array([[0, -1.5, 0, 10], [1.5, 0, 0, -4], [0, 0, 5, 2], [0, 0, 0, 1.0]])  # rotated, 1.5 mm pixels
    nib.save(nib.Nifti1Image(image, affine), str(folder / "scan.nii.gz"))
    nib.save(nib.Nifti1Image(label, affine), str(tmp_path / "scan_mask.nii.gz"))
    model = load(run_dir, device="cpu")
    ensemble = model.predict(data=str(folder))
    (path,) = ensemble.files
    saved = nib.load(path)
    assert path.name == "scan.nii.gz" and saved.shape == (30, 36, 6) and np.allclose(saved.affine, affine)
    assert np.array_equal(np.asarray(saved.dataobj), ensemble.arrays["masks"][0])
    one = model.predict(data=str(folder / "scan.nii.gz"), labels=str(tmp_path / "scan_mask.nii.gz"), fold=1)
    assert 0 <= one.rows[0]["foreground_fraction"] <= 1 and set(one.metrics) >= {"dice", "dice_cube"}


def test_predict_bad_inputs_are_one_line(cells, cubes, tmp_path, capfd):
    from PIL import Image

    root, run_dir = cells
    rgb = tmp_path / "rgb.png"
    Image.new("RGB", (48, 48), (1, 2, 3)).save(rgb)
    predict_bad(capfd, run_dir, f"data={rgb}", needles=(str(rgb), "3 channel(s)", "trained on 1"))
    volume = tmp_path / "vol.nii.gz"
    nifti(volume, np.zeros((20, 20, 6), np.float32), (1.0, 1.0, 1.0))
    predict_bad(capfd, run_dir, f"data={volume}", needles=(str(volume), "3-D input", "trained on 2-D images"))
    predict_bad(capfd, cubes[1], f"data={root / 'images' / 'slice0.png'}",
                needles=("slice0.png", "2-D input of shape (48, 48)", "trained on 3-D volumes"))
    predict_bad(capfd, run_dir, f"data={tmp_path / 'nowhere'}", needles=("nowhere", "no such file"))
    predict_bad(capfd, cubes[1], f"data={volume}", "fold=9", needles=("fold=9", "2 model(s)"))
    predict_bad(capfd, run_dir, "lables=x", needles=("unknown key 'lables'", "did you mean 'labels'"))


def _refused(model, **options) -> str:
    """The one-line error predict raises (the CLI prints it and exits 2, as the cases above)."""
    with pytest.raises(ZooError) as info:
        model.predict(**options)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_predict_bad_folders_and_masks(cells, tmp_path):
    from PIL import Image

    from recipe_zoo import load

    root, run_dir = cells
    model = load(run_dir, device="cpu")
    (tmp_path / "empty").mkdir()
    assert "no images or volumes" in _refused(model, data=str(tmp_path / "empty"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.png").write_bytes(b"not a png")
    assert _refused(model, data=str(broken)).startswith(f"{broken / 'x.png'}: cannot read image")
    pairs = tmp_path / "pairs"
    shutil.copytree(root, pairs)
    (pairs / "masks" / "slice3.png").unlink()
    assert _refused(model, data=str(pairs)).startswith(f"{pairs / 'images' / 'slice3.png'}: no mask named like it")
    odd = np.zeros((48, 48), np.uint8)
    odd[0, 0] = 7
    Image.fromarray(odd).save(pairs / "masks" / "slice3.png")
    assert "slice3.png: unexpected label value 7 (expected one of [0, 255])" in _refused(model, data=str(pairs))
    Image.fromarray(odd[:40]).save(pairs / "masks" / "slice3.png")
    assert "does not match image slice3.png" in _refused(model, data=str(pairs))
    one = str(root / "images" / "slice0.png")
    assert _refused(model, data=one, labels=str(tmp_path / "no_masks")).startswith("labels=")
    assert "overlap" in _refused(model, overlap=1.5)


def test_export_safetensors_predicts_the_same(cubes, tmp_path):
    from safetensors.torch import load_file

    from recipe_zoo import load
    from recipe_zoo.cli import main

    root, run_dir = cubes
    out = tmp_path / "export"
    assert main(["export", str(run_dir), "--format", "safetensors", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"model.json", "config.json", "plan.json", "model.safetensors", "model-fold1.safetensors"} <= names
    assert "predictions.csv" not in names and load_file(str(out / "model-fold1.safetensors"))
    scan = root / "imagesTr" / "case1.nii.gz"
    mine = load(out, device="cpu").predict(data=str(scan)).arrays["masks"][0]
    theirs = load(run_dir, device="cpu").predict(data=str(scan)).arrays["masks"][0]
    # the same weights from two files, in buffers aligned as each load chose (BLAS promises no bitwise result across
    # alignments): the same mask but for a voxel whose float32 scores nearly tie (at most 1 in 1,000)
    assert mine.shape == theirs.shape and np.mean(mine != theirs) <= 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("recipe,args", [
    ("medical/swinunetr", ["patch=64,64", "tta=false", "test_fraction=0.05"]),
    ("medical/unet", ["data=synthetic-3d", "patch=32,32,32", "tta=false", "test_fraction=0.05"])])
def test_swinunetr_and_3d_round_trip(recipe, args, tmp_path):
    run_dir = _train(tmp_path, *args, recipe=recipe, budget="2steps")
    result = roundtrip(run_dir)
    assert len(result.rows) == 2 and result.files[0].name.endswith(".png" if "patch=64,64" in args else ".nii.gz")


def test_dice_is_scored_at_the_labels_resolution_whatever_the_plan_spacing(cells, tmp_path):
    """spacing=2,2 trains and predicts on a grid of half the labels' resolution: the test's Dice is still that of
    the saved masks (on the images' own grid) against the label files, row by row and on average, so the plan's
    spacing (a method setting) never changes which pixels are scored."""
    root, _ = cells
    run_dir = _train(tmp_path, f"data={root}", "patch=16,16", "spacing=2,2", "tta=false")
    assert json.loads((run_dir / "plan.json").read_text())["plan"]["spacing"] == [2.0, 2.0]
    rows = _rows(run_dir / "predictions.csv")
    by_hand = []
    for row in rows:
        mask = _png(run_dir / "predictions" / row["mask"]) == 255
        truth = _png(root / "masks" / Path(row["file"]).name) == 255
        assert mask.shape == truth.shape == (48, 48)
        by_hand.append(2 * np.sum(mask & truth) / (np.sum(mask) + np.sum(truth)))
        assert float(row["dice"]) == pytest.approx(by_hand[-1], abs=1e-6)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["test_dice"] == pytest.approx(np.mean(by_hand), abs=1e-6)


def test_a_medical_run_fine_tunes_from_another_with_its_plan(cells, tmp_path, capfd):
    """weights=RUN: the source's network, plan and normalisation statistics are kept (never planned again); on the
    source's own cases, before the first step, its weights score its validation Dice to 1e-6; the card names the
    source. Test cases the source trained on (a 2-fold run on the same slices), another network kind: one line."""
    from conftest import bad_input

    root, source = cells
    before = json.loads((source / "summary.json").read_text())["metrics"]["val_dice"]
    tuned = _train(tmp_path / "same", f"data={root}", "flip_axes=0,1", f"weights={source}", budget="2steps")
    after = json.loads((tuned / "summary.json").read_text())
    assert after["metrics"]["val_dice_start"] == pytest.approx(before, abs=1e-6)
    assert after["benchmark"].endswith(":fine-tuned")
    assert json.loads((tuned / "plan.json").read_text())["plan"] == json.loads((source / "plan.json").read_text())["plan"]
    assert json.loads((tuned / "model.json").read_text())["source"]["run_id"] == source.name
    bad_input(capfd, ["medical/unet", f"data={root}", *TINY, "folds=2", f"weights={source}"], tmp_path / "bad",
              "test cases were in the source run's training or validation data")
    bad_input(capfd, ["medical/swinunetr", f"data={root}", *TINY, f"weights={source}"], tmp_path / "bad",
              "model=swinunetr: the source run", "is a unet; fine-tune it with medical/unet")
