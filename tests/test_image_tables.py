"""Images with a labels table (an images/ folder and labels.csv, the layout most image datasets ship in) for every
image recipe: files and labels found by column name or named (labels=, file_column=, label_column=), a split column
honoured as the split, and what cannot be used counted and named."""
import csv
import json

import numpy as np
import pytest
from PIL import Image

from conftest import bad_input, write_file
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes import images
from recipe_zoo.recipes.image_tables import LabelsTable


def table_folder(root, n=12, classes=("cat", "dog"), header=("image_id", "label"), rows=None, name="labels.csv",
                 suffix=""):
    """``root/images/<k>.png`` (each class its own brightness) and ``root/labels.csv`` listing them; ``rows``
    given: those rows instead (the images are still written). ``suffix``: what the table writes after each id."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    listed = []
    for k in range(n * len(classes)):
        c = k % len(classes)
        pixels = np.clip(rng.normal(60 + 120 * c, 30, (16, 16)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / "images" / f"{k}.png")
        listed.append((f"images/{k}{suffix}", classes[c]))
    with open(root / name, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows if rows is not None else listed)
    return root


def load(root, log=print, **labels):
    return images.load_folder_splits(root, 0, 0.1, 0.2, log, labels=LabelsTable(**labels))


def test_a_labels_table_lists_the_images_and_their_labels(tmp_path):
    """Ids without their suffix (image_id columns often omit it) are found; the split is the hash of each path, as
    for class folders; labels are classes in sorted order."""
    root = table_folder(tmp_path / "pets")
    data = load(root)
    assert data.classes == ["cat", "dog"] and data.train_x.shape[1:] == (1, 32, 32)
    assert len(data.train_y) + len(data.val_y) + len(data.test_y) == 24
    assert "hash of each file's path in labels.csv" in data.how
    assert all(key.startswith("images/") for key in data.keys["train"])
    again = load(root)
    assert data.keys == again.keys  # the same split every time


def test_the_split_column_is_the_split_and_validation_comes_from_train_without_val(tmp_path):
    rows = [(f"images/{k}.png", "cat" if k % 2 else "dog", "test" if k < 6 else "val" if k < 10 else "train")
            for k in range(24)]
    root = table_folder(tmp_path / "a", header=("file", "class", "split"), rows=rows)
    data = load(root)
    assert (len(data.train_y), len(data.val_y), len(data.test_y)) == (14, 4, 6)
    assert "(the split column of labels.csv)" in data.how
    rows = [(f, c, "train" if s == "val" else s) for f, c, s in rows]
    root = table_folder(tmp_path / "b", header=("file", "class", "Split"), rows=rows)
    data = load(root)
    assert len(data.test_y) == 6 and "the split column of labels.csv" in data.how and len(data.val_y) >= 1
    with pytest.raises(ZooError, match=r"labels.csv: its split column names 24 train and 0 test images"):
        load(table_folder(tmp_path / "c", header=("file", "class", "split"),
                          rows=[(f, c, "train") for f, c, _ in rows]))
    with pytest.raises(ZooError, match=r"labels.csv row 3: split 'holdout' is not train, val or test"):
        load(table_folder(tmp_path / "d", header=("file", "class", "split"),
                          rows=[rows[0], (*rows[1][:2], "holdout")]))


def test_named_tables_and_columns_and_what_is_counted(tmp_path):
    logged = []
    root = table_folder(tmp_path / "x", header=("path", "species", "breed"), name="meta.csv",
                        rows=[(f"images/{k}.png", "a" if k % 2 else "b", "z") for k in range(24)]
                        + [("images/3.png", "a", "z"), ("images/0.png", "b", "z")])  # rows 26, 27: repeats
    data = load(root, logged.append, path="meta.csv", label="species")
    assert data.classes == ["a", "b"] and any("2 repeated rows read once (rows 26, 27)" in m for m in logged)
    with pytest.raises(ZooError, match=r"meta.csv: no label column \(looked for label, class, .*; columns: path, "
                                       r"species, breed\); set label_column=COLUMN"):
        load(root, path="meta.csv")
    with pytest.raises(ZooError, match=r"no column 'kind' \(columns: path, species, breed\); set label_column="):
        load(root, path="meta.csv", label="kind")
    with pytest.raises(ZooError, match=r"labels=nope.csv: no such file"):
        load(root, path="nope.csv")
    logged.clear()
    rows = [(f"images/{k}.png", "a" if k < 22 else f"rare{k}") for k in range(24)]
    load(table_folder(tmp_path / "y", rows=rows, header=("file", "label")), logged.append)
    assert any("2 labels have one image each (rare22, rare23)" in m for m in logged)


@pytest.mark.parametrize("rows, needles", [
    ([("images/0.png", "a"), ("images/99.png", "b"), ("gone.png", "a")],
     ["labels.csv: 2 of 3 listed files are missing (row 3: 'images/99.png', row 4: 'gone.png'"]),
    ([("images/0.png", "a"), ("images/0.png", "b")],
     ["labels.csv row 3: 'images/0.png' is labelled 'b', and 'a' in row 2"]),
    ([(f"images/{k}.png", "a") for k in range(24)], ["one class only ('a'); classifying needs two classes"]),
    ([("images/0.png", ""), ("images/1.png", "a")], ["labels.csv row 2: no label in column 'label'"]),
    ([("labels.csv", "a"), ("images/1.png", "b")], ["labels.csv row 2: 'labels.csv' is not an image file"]),
    ([], ["labels.csv: no rows"]),
], ids=["missing-files", "conflicting-duplicate", "one-label", "empty-label", "not-an-image", "no-rows"])
def test_tables_that_cannot_be_used_are_one_line_exit_2(tmp_path, capfd, rows, needles):
    root = table_folder(tmp_path / "bad", header=("file", "label"), rows=rows)
    bad_input(capfd, ["vision/resnet", f"data={root}", "width=8"], tmp_path / "runs", *needles)


def test_a_corrupt_image_in_the_table_is_named(tmp_path, capfd):
    root = table_folder(tmp_path / "c")
    write_file(root / "images" / "5.png", b"not a png")
    bad_input(capfd, ["vision/resnet", f"data={root}", "width=8"], tmp_path / "runs", "5.png", "cannot decode image")


def test_columns_without_a_table_say_so(tmp_path, capfd):
    root = tmp_path / "folders"
    (root / "a").mkdir(parents=True)
    bad_input(capfd, ["vision/resnet", f"data={root}", "label_column=species"], tmp_path / "runs",
              "file_column= / label_column= name a labels table's columns", "give labels=FILE")


def _run(args, out):
    from recipe_zoo.cli import main

    assert main(["run", *map(str, args), "--out", str(out)]) == 0
    (run_dir,) = (out / args[0]).iterdir()
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("recipe, args", [
    ("vision/resnet", ["width=8", "batch_size=8", "tta=0"]),
    ("contrastive/simclr", ["width=8", "proj_hidden=32", "batch_size=8", "eval_every=0"]),
    ("diffusion/ddpm", ["width=8", "levels=2", "n_samples=8", "n_real=8", "sample_steps=2", "grid=4"]),
])
def test_every_image_recipe_trains_on_a_labels_table(tmp_path, recipe, args):
    root = table_folder(tmp_path / "pets", header=("file", "label", "split"),
                        rows=[(f"images/{k}.png", "cat" if k % 2 else "dog",
                               "test" if k < 6 else "val" if k < 12 else "train") for k in range(24)])
    summary = _run([recipe, f"data={root}", *args, "--budget", "2steps"], tmp_path / "runs")
    assert summary["status"] == "ok" and "(the split column of labels.csv)" in summary["extra"]["split"]


def test_a_run_predicts_a_labels_table_and_scores_it_where_its_labels_are_the_runs_classes(tmp_path, capfd):
    from recipe_zoo.cli import main

    root = table_folder(tmp_path / "pets")
    _run(["vision/resnet", f"data={root / 'labels.csv'}", "width=8", "batch_size=8", "tta=0", "--budget", "2steps"],
         tmp_path / "runs")  # data= the table itself: its paths are relative to it
    (run_dir,) = (tmp_path / "runs" / "vision" / "resnet").iterdir()
    out = tmp_path / "p.csv"
    capfd.readouterr()
    assert main(["predict", str(run_dir), f"data={root}", "--out", str(out), "--device", "cpu"]) == 0
    assert "labels.csv: 24 images with labels: scored against them" in capfd.readouterr().err
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 24 and rows[0]["file"] == "images/0.png"
    other = table_folder(tmp_path / "zoo", classes=("cat", "emu"))
    assert main(["predict", str(run_dir), f"data={other}", "--out", str(tmp_path / "q.csv"), "--device", "cpu"]) == 0
    assert "its labels are not all the run's classes, so not scored" in capfd.readouterr().err


def test_one_class_and_a_decompression_bomb_are_one_line_exit_2(tmp_path, capfd, monkeypatch):
    from PIL import Image as PILImage

    root = tmp_path / "one"
    (root / "cat").mkdir(parents=True)
    for k in range(6):
        PILImage.new("L", (16, 16), 40 * k).save(root / "cat" / f"{k}.png")
    bad_input(capfd, ["vision/resnet", f"data={root}", "width=8"], tmp_path / "runs",
              "one class only ('cat'); classifying needs two classes or more")
    bad_input(capfd, ["contrastive/simclr", f"data={root}", "width=8"], tmp_path / "runs", "one class only ('cat')")
    folder = table_folder(tmp_path / "big")
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 100)  # 16x16 images are then over twice Pillow's limit
    bad_input(capfd, ["vision/resnet", f"data={folder}", "width=8"], tmp_path / "runs", "decompression bomb",
              "downscale it first")
