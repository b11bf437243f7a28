"""Vision recipe pieces: data loading and its train / validation / test split, augmentation, models, the
fine-tuning path, and the protocol: selection reads validation, test is scored once at the end."""
import csv
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import conftest
from conftest import bad_input, summary_block, zoo, zoo_in_process
from recipe_zoo.recipes import backbones, image_decoding, image_splits, images
from recipe_zoo.recipes.vision import data, evaluation, resnet
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import torch_state_kept


def test_digits_split_is_fixed_and_validation_is_carved_from_train():
    a, b = images.load_digits_splits(), images.load_digits_splits()
    assert torch.equal(a.test_y, b.test_y) and len(a.test_y) == 360 and len(a.train_y) + len(a.val_y) == 1437
    assert 0.07 < len(a.val_y) / 1437 < 0.13 and torch.equal(a.val_x, b.val_x)
    assert a.train_x.dtype == torch.uint8 and a.train_x.shape[1:] == (1, 8, 8)
    assert torch.bincount(a.test_y).min() >= 35
    keys = {part: set(a.keys[part]) for part in image_splits.PARTS}  # content keys: a duplicate image stays on one side
    assert not keys["train"] & keys["validation"] and not keys["validation"] & keys["test"]
    assert [len(a.keys[p]) for p in image_splits.PARTS] == [len(a.train_y), len(a.val_y), len(a.test_y)]
    wider = images.load_digits_splits(0.2)  # a larger share only adds to validation
    assert keys["validation"] <= set(wider.keys["validation"]) and torch.equal(wider.test_y, a.test_y)


def test_digits_read_from_scikit_learns_file_are_its_load_digits():
    """The file read without importing scikit-learn holds what ``load_digits`` gives, pixel for pixel."""
    from sklearn.datasets import load_digits

    x, y, classes = images.digits_arrays()
    digits = load_digits()
    assert torch.equal(x, torch.from_numpy(digits.images * (255.0 / 16.0)).round().to(torch.uint8).unsqueeze(1))
    assert torch.equal(y, torch.from_numpy(digits.target).long()) and classes == [str(c) for c in digits.target_names]


def test_hash_parts_do_not_depend_on_the_order_of_the_items():
    keys = [f"c{i % 3}/{i}.png" for i in range(200)]
    parts = image_splits.hash_parts(keys, 0.1, 0.2)
    shuffled = [keys[i] for i in np.random.default_rng(0).permutation(200)]
    again = image_splits.hash_parts(shuffled, 0.1, 0.2)
    as_sets = lambda ks, ps: [{ks[i] for i in p} for p in ps]  # noqa: E731
    assert as_sets(keys, parts) == as_sets(shuffled, again)
    train, val, test = as_sets(keys, parts)
    assert len(train | val | test) == 200 and not (train & val or train & test or val & test)
    assert 20 < len(test) < 60 and 5 < len(val) < 30  # 20% of all, 10% of the rest


def test_translate_and_flip_are_deterministic_per_generator():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.uint8).view(2, 3, 8, 8)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = data.random_flip(data.random_translate(x, 2, g1), g1)
    b = data.random_flip(data.random_translate(x, 2, g2), g2)
    assert torch.equal(a, b) and a.shape == x.shape and a.dtype == torch.uint8


def test_zoo_resnet_shapes():
    for net in (backbones.ZooNet, backbones.ZooResNet):
        for size, channels in ((8, 1), (32, 3)):
            model = net(channels, 10, 8, size)
            assert model(torch.randn(2, channels, size, size)).shape == (2, 10)


def test_whitening_stem_whitens_patches():
    torch.manual_seed(0)
    mix = torch.randn(3, 3)
    x = torch.einsum("ij,njhw->nihw", mix, torch.randn(64, 3, 16, 16))  # correlated channels
    model = backbones.ZooNet(3, 10, 8, 16)
    model.init_whitening(x, eps=0.0)
    out = model.whiten(x) - model.whiten.bias.view(1, -1, 1, 1)
    half = out[:, :12].permute(0, 2, 3, 1).reshape(-1, 12)
    cov = half.T @ half / len(half)
    torch.testing.assert_close(cov, torch.eye(12), atol=0.05, rtol=0)
    assert not model.whiten.weight.requires_grad


def _files(root, classes=("a", "b"), n=5):
    from PIL import Image

    for cls in classes:
        (root / cls).mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (10, 10), (i * 40, 0, 0)).save(root / cls / f"{i}.png")
    return root


def test_own_folder_split_by_hash_of_the_paths(tmp_path):
    _files(tmp_path / "flat", n=20)
    splits = images.load_folder_splits(tmp_path / "flat", 16, 0.1, 0.2, log=lambda s: None)
    assert len(splits.train_y) + len(splits.val_y) + len(splits.test_y) == 40
    assert splits.train_x.shape[1:] == (3, 16, 16)
    assert min(len(splits.val_y), len(splits.test_y)) >= 1
    keys = {p: set(splits.keys[p]) for p in image_splits.PARTS}
    assert set().union(*keys.values()) == {f"{c}/{i}.png" for c in "ab" for i in range(20)}
    assert sum(len(k) for k in keys.values()) == 40
    again = images.load_folder_splits(tmp_path / "flat", 16, 0.1, 0.2, log=lambda s: None)
    assert again.keys == splits.keys and torch.equal(splits.test_x, again.test_x)
    # the same files elsewhere, under another name: the same split (the keys are relative to the root)
    import shutil

    shutil.copytree(tmp_path / "flat", tmp_path / "moved")
    assert images.load_folder_splits(tmp_path / "moved", 16, 0.1, 0.2, log=lambda s: None).keys == splits.keys


def test_own_folder_with_train_and_val_uses_val_as_test(tmp_path):
    root = tmp_path / "photos"
    _files(root / "train", n=15)
    _files(root / "val", n=2)
    logs = []
    splits = images.load_folder_splits(root, 16, 0.1, 0.2, log=logs.append)
    assert splits.keys["test"] == ["val/a/0.png", "val/a/1.png", "val/b/0.png", "val/b/1.png"]
    assert all(k.startswith("train/") for k in splits.keys["train"] + splits.keys["validation"])
    assert len(splits.train_y) + len(splits.val_y) == 30 and len(splits.val_y) >= 1
    assert "4 test (val/)" in splits.how and "validation" in logs[-1]
    _files(root / "test", n=3)  # all three folders: the split as given
    given = images.load_folder_splits(root, 16, 0.1, 0.2, log=logs.append)
    assert (len(given.train_y), len(given.val_y), len(given.test_y)) == (30, 4, 6)
    assert given.keys["validation"][0] == "val/a/0.png" and given.keys["test"][0] == "test/a/0.png"


def test_mixed_sizes_need_a_size(tmp_path):
    from PIL import Image

    Image.new("RGB", (10, 10)).save(tmp_path / "0.png")
    Image.new("RGB", (12, 12)).save(tmp_path / "1.png")
    paths = [tmp_path / "0.png", tmp_path / "1.png"]
    with pytest.raises(ZooError, match="different sizes.*image_size"):  # a named dataset's own size
        image_decoding.decode_images(paths, None, tmp_path)
    assert image_decoding.decode_images(paths, 8, tmp_path).shape == (2, 3, 8, 8)


def test_finetune_needs_weights(tmp_path):
    proc = zoo_in_process("run", "vision/finetune", "--budget", "2steps", "--out", tmp_path)
    assert proc.returncode == 2 and "needs pretrained weights: weights=PATH" in proc.stderr


def test_finetune_hub_offline_is_clear(tmp_path):
    proc = zoo("run", "vision/finetune", "model=test_resnet", "weights=hub", "--budget", "2steps", "--out", tmp_path,
               env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and "weights=hub: cannot get pretrained test_resnet" in proc.stderr


@pytest.mark.slow
def test_finetune_from_local_timm_weights(tmp_path):
    """A tiny real timm model saved locally stands in for downloaded pretrained weights."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    pretrained = timm.create_model("test_resnet", num_classes=1000)
    weights = tmp_path / "test_resnet.safetensors"
    save_file(pretrained.state_dict(), str(weights))
    proc = zoo_in_process("run", "vision/finetune", "model=test_resnet", f"weights={weights}", "image_size=32",
                          "batch_size=32", "head_fraction=0.5", "eval_every=0.5", "log_every=0", "--budget", "8steps",
                          "--out", tmp_path / "runs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary_block(proc.stdout)["status"] == "ok"
    assert "largest relative weight change" in proc.stdout
    stem_key = next(k for k in pretrained.state_dict() if k.startswith("conv1"))
    from safetensors.torch import load_file

    run_dir = next((tmp_path / "runs" / "vision" / "finetune").iterdir())
    tuned = load_file(run_dir / "model.safetensors")
    # stage 2 (last half) trained the backbone at the lower LR: it moved, but the stem kept its pretrained shape
    assert tuned[stem_key].shape == pretrained.state_dict()[stem_key].shape
    assert not torch.equal(tuned[stem_key], pretrained.state_dict()[stem_key])


def test_an_rgb_run_fine_tunes_on_grey_images_through_its_own_stem(tmp_path):
    """A zoo-net run on RGB images starts a fine-tune on grey digits: its whitening stem (as many filters as the
    channels make) is kept, the grey images reach it in all three channels (the log says so), the card records the
    three channels, and zoo predict reads the grey test images the same way."""
    rgb = tmp_path / "rgb"
    for cls, colour in (("red", (200, 10, 10)), ("blue", (10, 10, 200))):
        for i in range(12):
            _png(rgb / cls / f"{i}.png", colour)
    source, _ = conftest.run_ok("vision/resnet", f"data={rgb}", "width=8", "tta=0", "--out", tmp_path / "src",
                                budget="3steps")
    assert backbones.source_channels("zoo-net", source["run_dir"]) == 3
    tuned, r = conftest.run_ok("vision/resnet", "data=digits", f"weights={source['run_dir']}", "width=8", "tta=0",
                               "--out", tmp_path / "ft", budget="3steps")
    assert "the source was trained on RGB images; these grey images are given to its stem in all three channels" \
        in r.stdout + r.stderr
    assert "a new head for these 10 classes" in r.stdout + r.stderr
    assert tuned["status"] == "ok"
    card = json.loads((Path(tuned["run_dir"]) / "model.json").read_text())
    assert card["preprocess"]["channels"] == 3, card
    conftest.roundtrip(Path(tuned["run_dir"]))  # zoo predict of the grey test split gives the run's predictions
    assert backbones.source_channels("zoo-net", tuned["run_dir"]) == 3
    assert backbones.source_channels("resnet18", source["run_dir"]) is None


def test_a_run_of_the_same_classes_keeps_its_head_and_starts_at_its_validation_accuracy(tmp_path):
    """weights=RUN on data of the source's classes keeps its head: before the first step the model scores the
    source's own validation accuracy to 1e-6 (val_accuracy_start); a contrastive backbone has no head to keep."""
    source, _ = conftest.run_ok("vision/resnet", "data=digits", "width=8", "--out", tmp_path / "src", budget="3steps")
    tuned, r = conftest.run_ok("vision/resnet", "data=digits", f"weights={source['run_dir']}", "width=8",
                               "--out", tmp_path / "ft", budget="2steps")
    before = json.loads((Path(source["run_dir"]) / "summary.json").read_text())["metrics"]["val_accuracy"]
    after = json.loads((Path(tuned["run_dir"]) / "summary.json").read_text())["metrics"]
    assert "the source's head kept (the same classes)" in r.stdout + r.stderr
    assert after["val_accuracy_start"] == pytest.approx(before, abs=1e-6)
    assert backbones.source_classes(source["run_dir"]) == [str(d) for d in range(10)]
    ssl, _ = conftest.run_ok("contrastive/simclr", "width=8", "proj_hidden=32", "--out", tmp_path / "ssl",
                             budget="2steps")
    assert backbones.source_classes(ssl["run_dir"]) is None and backbones.source_classes("") is None


def _png(path: Path, colour, size=8):
    """A noisy RGB image around ``colour`` (noise, so that the whitening stem has a covariance to whiten)."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(f"{path.parent.name}/{path.name}".encode()))
    pixels = np.clip(np.array(colour) + rng.normal(0, 30, (size, size, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)


def test_stage_hook_freezes_backbone_in_stage_one():
    import timm

    model = timm.create_model("test_resnet", num_classes=3)
    cfg = resnet.VisionConfig(head_fraction=0.5, weights="x")
    hook = resnet.stage_hook(cfg, model, "fc")
    hook(0.1, 0)
    assert all(p.requires_grad == n.startswith("fc.") for n, p in model.named_parameters())
    hook(0.6, 10)
    assert all(p.requires_grad for p in model.parameters())
    top = resnet.VisionConfig(head_fraction=0.0, weights="x", unfreeze_top=1)
    hook = resnet.stage_hook(top, model, "fc")
    hook(0.6, 10)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and not any(n.startswith("fc.") for n in frozen)
    assert model.conv1[0].weight.requires_grad is False


def test_layer_decay_lowers_lr_towards_input():
    import timm

    model = timm.create_model("test_resnet", num_classes=3)
    cfg = resnet.VisionConfig(weights="x", optimizer="adamw", lr=1e-3, layer_decay=0.5, finetune_lr_ratio=0.1)
    opt = resnet.build_optimizer(cfg, model, "fc")
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert lr_of[id(model.fc.weight)] == pytest.approx(1e-3)
    last_block = next(model.layer4.parameters())
    assert lr_of[id(model.conv1[0].weight)] < lr_of[id(last_block)] <= 1e-4 + 1e-12


def test_read_idx_round_trip_and_errors(tmp_path):
    import gzip
    import struct

    pixels = torch.randint(0, 256, (3, 4, 5), dtype=torch.uint8)
    path = tmp_path / "x-idx3-ubyte.gz"
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">HBB3I", 0, 8, 3, 3, 4, 5) + pixels.numpy().tobytes())
    assert torch.equal(images.read_idx(path), pixels)
    bad = tmp_path / "bad.gz"
    with gzip.open(bad, "wb") as f:
        f.write(struct.pack(">HBB1I", 0, 8, 1, 10) + b"short")
    with pytest.raises(ZooError, match="bad.gz: cannot read idx data"):
        images.read_idx(bad)


def test_randaugment_mixup_cutmix_options():
    cfg = resnet.VisionConfig(randaugment=2, crop_pad=1, flip="on", mixup=0.2, cutmix=1.0)
    x = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
    y = torch.arange(6) % 3
    a = data.augment((x, y), torch.Generator().manual_seed(1), cfg)
    b = data.augment((x, y), torch.Generator().manual_seed(1), cfg)
    assert torch.equal(a[0], b[0]) and a[0].dtype == torch.uint8 and a[0].shape == x.shape
    mixed_x, soft_y = data.mix(x.float(), y, 3, cfg)
    assert soft_y.shape == (6, 3) and torch.allclose(soft_y.sum(1), torch.ones(6))


def test_tta_levels_average_views():
    model = backbones.ZooNet(3, 4, 8, 16).eval()
    x = torch.randint(0, 256, (5, 3, 16, 16), dtype=torch.uint8)
    normalize = lambda t: t.float() / 255  # noqa: E731
    with torch.no_grad():
        plain = evaluation.predict(model, x, normalize, 0, True)
        mirrored = evaluation.predict(model, x, normalize, 1, True)
        no_flip = evaluation.predict(model, x, normalize, 1, False)
        expected = 0.5 * (model(x.float() / 255) + model(x.float().flip(-1) / 255))
    torch.testing.assert_close(mirrored, expected)
    torch.testing.assert_close(no_flip, plain)
    assert evaluation.predict(model, x, normalize, 2, True).shape == (5, 4)


# ---------------------------------------------------------------------------------------------
# Bad input, one table: exit 2, one line naming the file (and the item or key), no ok row
# ---------------------------------------------------------------------------------------------

def _image_folder(root, classes=("a", "b"), n=3, size=8):
    from PIL import Image

    for c, cls in enumerate(classes):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.new("RGB", (size, size), (40 * i, 60 * c, 90)).save(root / cls / f"{i}.png")
    return root


def _png_bytes(size=8) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


def _vision_bad_case(case: str, tmp):
    """(recipe args, needles the error line must hold, budget) for one bad input."""
    good = _image_folder(tmp / "good")
    if case == "missing_folder":
        return [f"data={tmp / 'nowhere'}"], ["nowhere", "not a vision dataset"], "3steps"
    if case == "empty_folder":
        (tmp / "empty").mkdir()
        return [f"data={tmp / 'empty'}"], ["empty", "no class subfolders"], "3steps"
    if case == "file_not_folder":  # a .csv would be a labels table (tests/test_image_tables.py)
        (tmp / "pics.txt").write_text("path,label\n0.png,a\n")
        return [f"data={tmp / 'pics.txt'}"], ["pics.txt", "not a folder"], "3steps"
    if case == "no_class_subfolders":  # images straight in the folder
        (tmp / "flat").mkdir()
        for i in range(3):
            (tmp / "flat" / f"{i}.png").write_bytes(_png_bytes())
        return [f"data={tmp / 'flat'}"], ["flat", "no class subfolders"], "3steps"
    if case == "class_folders_without_images":
        for cls in ("a", "b"):
            (tmp / "noimg" / cls).mkdir(parents=True)
            (tmp / "noimg" / cls / "readme.txt").write_text("no pictures here")
        return [f"data={tmp / 'noimg'}"], ["noimg", "no images found"], "3steps"
    if case == "empty_class_folder":
        (good / "c").mkdir()
        return [f"data={good}"], [str(good / "c"), "no images"], "3steps"
    if case == "corrupt_png":
        (good / "b" / "7.png").write_bytes(b"\x00\x01garbage bytes, not an image")
        return [f"data={good}"], [str(good / "b" / "7.png"), "cannot decode image"], "3steps"
    if case == "truncated_png":
        (good / "a" / "8.png").write_bytes(_png_bytes(64)[:60])
        return [f"data={good}"], [str(good / "a" / "8.png"), "cannot decode image"], "3steps"
    if case == "corrupt_jpg":
        (good / "a" / "9.jpg").write_bytes(b"\xff\xd8\xff\xe0garbage")
        return [f"data={good}"], [str(good / "a" / "9.jpg"), "cannot decode image"], "3steps"
    if case == "empty_image_file":
        (good / "a" / "0.png").write_bytes(b"")
        return [f"data={good}"], [str(good / "a" / "0.png"), "cannot decode image"], "3steps"
    if case == "val_split_missing_a_class":
        _image_folder(tmp / "split" / "train")
        _image_folder(tmp / "split" / "val", classes=("a",))
        return [f"data={tmp / 'split'}"], [str(tmp / "split" / "val"), "class folder 'b' is missing"], "3steps"
    if case == "typo_key":
        return [f"data={good}", "batch_sise=4"], ["unknown key 'batch_sise'", "did you mean 'batch_size'?"], "3steps"
    if case == "bad_int":
        return [f"data={good}", "batch_size=abc"], ["batch_size='abc'", "not a valid int"], "3steps"
    if case == "bad_float":
        return [f"data={good}", "lr=fast"], ["lr='fast'", "not a valid float"], "3steps"
    if case == "bad_choice":
        return [f"data={good}", "optimizer=adam"], ["optimizer='adam'", "must be one of"], "3steps"
    if case == "zero_budget":
        return [f"data={good}"], ["'0s'", "must be positive"], "0s"
    if case == "negative_budget":
        return [f"data={good}"], ["'-5'", "expected a number and a unit"], "-5"
    if case == "missing_weights":
        return [f"data={good}", f"weights={tmp / 'w.safetensors'}"], ["w.safetensors", "not found"], "3steps"
    if case in ("corrupt_weights", "corrupt_weights_pt"):
        name = "w.safetensors" if case == "corrupt_weights" else "w.pt"
        (tmp / name).write_bytes(b"\x00not really weights")
        why = "cannot read weights" if case == "corrupt_weights" else "refused to load: not a file of plain tensors"
        return [f"data={good}", f"weights={tmp / name}"], [str(tmp / name), why], "3steps"
    if case == "finetune_corrupt_weights":  # the timm path of vision/finetune
        (tmp / "w.safetensors").write_bytes(b"\x00not really weights")
        return (["vision/finetune", f"data={good}", "model=test_resnet", f"weights={tmp / 'w.safetensors'}"],
                [str(tmp / "w.safetensors"), "cannot read weights into test_resnet"], "3steps")
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "missing_folder", "empty_folder", "file_not_folder", "no_class_subfolders", "class_folders_without_images",
    "empty_class_folder", "corrupt_png", "truncated_png", "corrupt_jpg", "empty_image_file",
    "val_split_missing_a_class", "typo_key", "bad_int", "bad_float", "bad_choice", "zero_budget", "negative_budget",
    "missing_weights", "corrupt_weights", "corrupt_weights_pt", "finetune_corrupt_weights"])
def test_bad_input_table(case, tmp_path, capfd):
    args, needles, budget = _vision_bad_case(case, tmp_path)
    recipe = args.pop(0) if args[0].startswith("vision/") else "vision/resnet"
    bad_input(capfd, [recipe, *args, "width=8", "image_size=8"], tmp_path / "runs", *needles, budget=budget)


# ---------------------------------------------------------------------------------------------
# The protocol: selection reads validation while training; test is scored once, at the end
# ---------------------------------------------------------------------------------------------

def _train_in_process(out, seed=0, **overrides):
    """vision/resnet on digits in this process, 4 steps; a SimpleRun keeps its rows and split: (metrics, run)."""
    from types import SimpleNamespace

    from recipe_zoo.core.api import SimpleRun
    from recipe_zoo.core.budget import parse_budget
    from recipe_zoo.core.precision import seed_everything

    out.mkdir(parents=True)
    run = SimpleRun(budget=parse_budget("4steps"), seed=seed, dir=out, device="cpu", log=lambda s: None,
                    spec=SimpleNamespace(name="vision/resnet"))
    seed_everything(seed)
    with torch_state_kept():  # as `zoo run` leaves the caller's torch switches
        return resnet.train(resnet.VisionConfig(width=8, eval_every=0.5, **overrides), run), run


def test_garbage_test_labels_change_nothing_before_the_end(tmp_path, monkeypatch):
    """The test images and labels replaced by noise: every validation row is the same, only the test score moves;
    the split is the same for another seed, and the interval brackets the test accuracy."""
    honest, run = _train_in_process(tmp_path / "honest")
    conftest.garble_digits_test(monkeypatch)
    garbled, garbled_run = _train_in_process(tmp_path / "garbled")
    assert len(run.eval_rows) == 2 and conftest.without_timing(run.eval_rows) == conftest.without_timing(garbled_run.eval_rows)
    assert not [k for r in run.eval_rows for k in r if k.startswith("test")]  # rows during training: validation
    assert garbled["val_accuracy"] == honest["val_accuracy"] and garbled["test_accuracy"] != honest["test_accuracy"]
    assert honest["test_accuracy_ci_low"] <= honest["test_accuracy"] <= honest["test_accuracy_ci_high"]
    assert honest["test_accuracy_ci_high"] - honest["test_accuracy_ci_low"] > 0.02  # 360 images: a real spread
    monkeypatch.undo()  # the real test images again
    _, other_seed = _train_in_process(tmp_path / "seed1", seed=1)
    assert other_seed.splits == run.splits and [len(run.splits[p]) for p in image_splits.PARTS][2] == 360


def test_own_folder_run_records_its_split(tmp_path):
    from PIL import Image

    root = tmp_path / "pics"
    rng = np.random.default_rng(0)
    for cls, colour in (("red", (200, 30, 30)), ("blue", (30, 30, 200))):
        (root / cls).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(np.clip(rng.normal(colour, 30, (8, 8, 3)), 0, 255).astype(np.uint8)).save(
                root / cls / f"{i}.png")
    proc = zoo_in_process("run", "vision/resnet", f"data={root}", "width=8", "batch_size=8", "eval_every=0.5",
                          "--budget", "3steps", "--out", tmp_path / "runs")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    block = summary_block(proc.stdout)
    assert block["metric"] == "test_accuracy" and "validation" in block["split"] and "test" in block["split"]
    run_dir = next((tmp_path / "runs" / "vision" / "resnet").iterdir())
    with open(run_dir / "split.csv") as f:
        rows = list(csv.DictReader(f))
    items = [r["item"] for r in rows]
    assert sorted(items) == sorted(f"{c}/{i}.png" for c in ("red", "blue") for i in range(12))  # each file once
    assert {r["split"] for r in rows} == {"train", "validation", "test"}
    result = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert {"test_accuracy", "val_accuracy", "test_macro_f1", "test_accuracy_ci_low",
            "test_accuracy_ci_high"} <= set(result)
    assert result["test_accuracy_ci_low"] <= result["test_accuracy"] <= result["test_accuracy_ci_high"]
    with open(run_dir / "metrics.csv") as f:
        assert not [c for c in next(csv.reader(f)) if c.startswith("test")]


def test_compile_with_bf16_on_a_cpu_trains_eager_and_says_so():
    """torch 2.14's inductor gives the compiled zoo-net NaN gradients under a bf16 autocast on a CPU (the run
    diverged at step 2): compile=true there trains eager, in one log line, and the run is ok."""
    r = zoo_in_process("run", "vision/resnet", "data=digits", "compile=true", "precision=bf16", "--budget", "5steps")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    block = summary_block(r.stdout)
    assert block["status"] == "ok"
    log = (Path(block["run_dir"]) / "log.txt").read_text()
    assert "compile=true with bf16 on a CPU: training eager" in log
