"""Contrastive: NT-Xent and the BYOL loss against direct computations, the target's momentum, kNN votes,
the linear probe, replayable two-view augmentation, and ``contrastive/*`` end to end on bundled digits
and own folders (the exported backbone loads into vision), with their bad inputs; the protocol: pretraining
sees neither validation nor test images, kNN monitoring reads validation, test is scored once at the end."""
import functools
import math
import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import conftest
from recipe_zoo.recipes import backbones, image_splits, images
from recipe_zoo.recipes.contrastive import data, evaluation, models, simclr
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import torch_state_kept

run_ok = functools.partial(conftest.run_ok, budget="12steps")
run_bad = functools.partial(conftest.run_bad, budget="2steps")


def test_nt_xent_matches_a_direct_computation():
    g = torch.Generator().manual_seed(0)
    z1, z2, t = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g), 0.3
    z = F.normalize(torch.cat((z1, z2)), dim=1)
    losses = []
    for i in range(10):
        j = (i + 5) % 10  # the other view of the same image
        others = sum(math.exp(float(z[i] @ z[k]) / t) for k in range(10) if k != i)
        losses.append(-math.log(math.exp(float(z[i] @ z[j]) / t) / others))
    assert simclr.nt_xent(z1, z2, t).item() == pytest.approx(sum(losses) / 10, rel=1e-5)
    # Partners that agree and differ from the rest make the loss small; swapped partners make it large.
    basis = torch.eye(8)[:4] * 10
    assert simclr.nt_xent(basis, basis, 0.1) < 1e-3 < simclr.nt_xent(basis, basis.roll(1, 0), 0.1)
    # Under a bf16 autocast (the CPU's fast path) the similarities stay fp32: the same loss to fp32 rounding,
    # where a bf16 matmul of the same features is off by far more.
    z1, z2 = torch.randn(64, 128, generator=g), torch.randn(64, 128, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = simclr.nt_xent(z1, z2, 0.2).item()
        zn = F.normalize(torch.cat((z1, z2)), dim=1)
        rounded = (zn @ zn.T).float()
    assert fast == pytest.approx(simclr.nt_xent(z1, z2, 0.2).item(), rel=1e-6)
    assert (rounded - zn @ zn.T).abs().max() > 1e-3


def test_byol_loss_and_target_momentum():
    p = torch.randn(4, 6)
    assert simclr.byol_loss(p, 3 * p).item() == pytest.approx(0.0, abs=1e-6)  # scale-free: cosine
    assert simclr.byol_loss(p, -p).item() == pytest.approx(4.0)
    assert models.byol_momentum(0.99, 0.0) == pytest.approx(0.99)
    assert models.byol_momentum(0.99, 0.5) == pytest.approx(0.995)
    assert models.byol_momentum(0.99, 1.0) == pytest.approx(1.0)
    backbone = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model = models.SSLModel(backbone, torch.nn.Linear(4, 2), predictor=torch.nn.Linear(2, 2))
    assert not any(p.requires_grad for p in model.target.parameters())
    before = model.target[0][0].weight.clone()
    with torch.no_grad():
        backbone[0].weight.add_(1.0)
        backbone[1].num_batches_tracked.fill_(7)
    models.update_target(model, 0.9)
    assert torch.allclose(model.target[0][0].weight, before + 0.1)  # 0.9 target + 0.1 online
    assert int(model.target[0][1].num_batches_tracked) == 7  # integer buffers are copied


def test_byol_predictor_learns_faster_and_the_target_not_at_all():
    backbone = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model = models.SSLModel(backbone, models.mlp(4, 8, 2), predictor=models.mlp(2, 8, 2))
    opt = simclr.build_optimizer(simclr.ContrastiveConfig(lr=1e-3, pred_lr=10.0), model)
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert {lr_of[id(p)] for p in model.predictor.parameters()} == {1e-2}
    assert {lr_of[id(p)] for p in model.backbone.parameters()} == {1e-3}
    assert not any(id(p) in lr_of for p in model.target.parameters())
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert id(backbone[0].weight) in decayed and id(backbone[0].bias) not in decayed
    # a fine-tune's backbone at backbone_lr x lr (unset: 0.1), its new projector and predictor as from scratch
    for share, expected in ((0.5, 5e-4), (-1.0, 1e-4)):
        tuned = simclr.build_optimizer(simclr.ContrastiveConfig(lr=1e-3, backbone_lr=share), model, fine_tune=True)
        lr_of = {id(p): g["lr"] for g in tuned.param_groups for p in g["params"]}
        assert all(lr_of[id(p)] == pytest.approx(expected) for p in model.backbone.parameters())
        assert {lr_of[id(p)] for p in model.projector.parameters()} == {1e-3}
        assert {lr_of[id(p)] for p in model.predictor.parameters()} == {1e-2}


def test_knn_votes_are_weighted_by_similarity():
    bank = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.1, 1.0]])
    labels = torch.tensor([0, 1, 1])
    query = torch.tensor([[1.0, 0.2]])
    sims = F.normalize(query, dim=1) @ F.normalize(bank, dim=1).T
    scores = evaluation.knn_scores(bank, labels, query, k=3, temperature=0.1, num_classes=2)
    expected = torch.tensor([[math.exp(sims[0, 0] / 0.1), math.exp(sims[0, 1] / 0.1) + math.exp(sims[0, 2] / 0.1)]])
    assert torch.allclose(scores, expected, rtol=1e-5)
    assert scores.argmax().item() == 0  # one close neighbour outvotes two far ones at a low temperature
    assert evaluation.knn_scores(bank, labels, query, k=3, temperature=100.0, num_classes=2).argmax().item() == 1
    assert evaluation.knn_scores(bank, labels, query, k=1, temperature=100.0, num_classes=2)[0, 1] == 0  # only k vote


def test_linear_probe_separates_separable_features():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(60) % 3
    f = torch.randn(60, 5, generator=g) + 4 * F.one_hot(y, 5).float()
    proba = evaluation.linear_probe(f[:45], y[:45], f[45:])
    assert proba.shape == (15, 3) and torch.equal(proba.argmax(1), y[45:])


@pytest.mark.parametrize("channels", [1, 3])
def test_two_views_differ_and_replay_from_the_seed(channels):
    cfg = simclr.ContrastiveConfig(crop_min=0.2, flip="on", blur=0.5)
    augment = data.build_augment(cfg, channels, 16)
    x = torch.rand(6, channels, 16, 16)
    a1, a2 = data.two_views(augment, x, seed=3)
    b1, _ = data.two_views(augment, x, seed=3)
    assert a1.shape == x.shape and torch.equal(a1, b1)  # the same seed: the same draws and ops, in this process
    assert not torch.allclose(a1, a2) and not torch.allclose(a1, x)
    assert "blur" in data.describe_augment(cfg, channels, 16)


def test_simclr_trains_on_views_smaller_than_the_images_it_is_scored_on():
    """view_size=-1: SimCLR crops its views to 3/4 of the image side from 16 px up (BYOL and smaller images keep
    theirs; 0 keeps them, a number sets them); the augmentation makes views of that size from whole images."""
    def views(size, method="simclr", view_size=-1):
        pretrain = SimpleNamespace(pretrain_x=torch.zeros(1, 3, size, size), eval=SimpleNamespace(name="folder"))
        return data.resolve_auto(simclr.ContrastiveConfig(method=method, view_size=view_size), pretrain).view_size

    assert (views(32), views(224), views(16), views(12)) == (24, 168, 12, 12)
    assert (views(32, "byol"), views(32, view_size=0), views(32, view_size=20)) == (32, 32, 20)
    augment = data.build_augment(simclr.ContrastiveConfig(crop_min=0.2, flip="on"), 3, 12)
    assert data.two_views(augment, torch.rand(4, 3, 16, 16), seed=0)[0].shape == (4, 3, 12, 12)


@pytest.mark.parametrize("model,dim", [("zoo-resnet", 32), ("zoo-net", 32), ("test_resnet", None)])
def test_backbones_give_features_without_a_classifier(model, dim):
    cfg = simclr.ContrastiveConfig(model=model, width=8)
    backbone, width = models.build_backbone(cfg, 3, 16)
    assert width == (dim or width) and backbone(torch.rand(2, 3, 16, 16)).shape == (2, width)


@pytest.mark.parametrize("key,value", [("temperature", 0.0), ("knn_temperature", -1.0), ("knn_k", 0),
                                       ("momentum_base", 1.0), ("crop_min", 1.5), ("blur", 2.0), ("batch_size", 1)])
def test_config_values_are_checked(key, value):
    with pytest.raises(ZooError, match=key):
        simclr.check_config(simclr.ContrastiveConfig(**{key: value}))


def test_simclr_on_digits_exports_a_backbone_vision_loads(tmp_path):
    summary, _ = run_ok("contrastive/simclr", "model=zoo-resnet", "width=8", "proj_hidden=64")
    assert summary["metric"] == "test_knn_accuracy" and summary["status"] == "ok"
    import json

    from pathlib import Path

    result = json.loads((Path(summary["run_dir"]) / "summary.json").read_text())["metrics"]
    for key in ("test_knn_accuracy", "test_knn_macro_f1", "test_linear_accuracy", "test_linear_macro_f1",
                "val_knn_accuracy"):
        assert 0.2 < result[key] <= 1.0, (key, result[key])  # 10 classes: chance is 0.1
    assert result["test_knn_accuracy_ci_low"] <= result["test_knn_accuracy"] <= result["test_knn_accuracy_ci_high"]
    assert "360 test" in summary["split"] and "without labels" in summary["split"]
    assert "random resized crop" in summary["augment"]
    model = backbones.ZooResNet(1, 10, 8, 8)
    backbones._load_own_weights(model, summary["run_dir"], "zoo-resnet")  # as vision/resnet weights=RUN_DIR loads it


def test_simclr_fine_tunes_from_a_contrastive_or_a_vision_run(tmp_path):
    """weights=RUN_DIR: the backbone (model and width from the source's card), its whitening and input statistics
    kept, the projector new; before the first step the source's backbone scores the source's own validation kNN
    to 1e-6; the run names its source and is keyed as a fine-tune. A contradicting width, another domain's run and
    a missing folder are one line each."""
    import json
    from pathlib import Path

    source, _ = run_ok("contrastive/simclr", "width=8", "proj_hidden=64", "--out", tmp_path / "src")
    src = Path(source["run_dir"])
    tuned, _ = run_ok("contrastive/simclr", f"weights={src}", "proj_hidden=64", "--out", tmp_path / "ft",
                      budget="4steps")
    metrics = json.loads((Path(tuned["run_dir"]) / "summary.json").read_text())["metrics"]
    source_val = json.loads((src / "summary.json").read_text())["metrics"]["val_knn_accuracy"]
    assert metrics["val_knn_accuracy_start"] == pytest.approx(source_val, abs=1e-6)
    card = json.loads((Path(tuned["run_dir"]) / "model.json").read_text())
    assert card["architecture"]["width"] == 8 and card["source"]["run_id"] == src.name  # width from the source
    assert card["preprocess"]["mean"] == json.loads((src / "model.json").read_text())["preprocess"]["mean"]
    assert tuned["benchmark"].endswith(":fine-tuned")
    assert card["selected"] == ("start" if metrics["val_knn_accuracy_start"] > metrics.get(
        "val_knn_accuracy_tuned", metrics["val_knn_accuracy"]) else "final")
    # The start is a candidate, chosen on validation: a fine-tune that wrecks the backbone (an LR of 3) keeps the
    # source's, whose test kNN is then the source's own to 1e-6 (the same training images as its bank).
    wrecked, _ = run_ok("contrastive/simclr", f"weights={src}", "proj_hidden=64", "lr=3", "--out", tmp_path / "wr",
                        budget="4steps")
    metrics = json.loads((Path(wrecked["run_dir"]) / "summary.json").read_text())["metrics"]
    source_metrics = json.loads((src / "summary.json").read_text())["metrics"]
    assert metrics["val_knn_accuracy_tuned"] < metrics["val_knn_accuracy"] == metrics["val_knn_accuracy_start"]
    assert json.loads((Path(wrecked["run_dir"]) / "model.json").read_text())["selected"] == "start"
    assert "the source's backbone" in wrecked["selected"]
    assert metrics["test_knn_accuracy"] == pytest.approx(source_metrics["test_knn_accuracy"], abs=1e-6)
    vision, _ = run_ok("vision/resnet", "model=zoo-resnet", "width=8", "eval_every=0", "--out", tmp_path / "vis",
                       budget="4steps")
    from_vision, _ = run_ok("contrastive/byol", f"weights={vision['run_dir']}", "proj_hidden=64", "batch_size=16",
                            "--out", tmp_path / "fv", budget="3steps")
    assert json.loads((Path(from_vision["run_dir"]) / "model.json").read_text())["source"]["recipe"] == "vision/resnet"
    assert "width=16: the source run" in run_bad("contrastive/simclr", f"weights={src}", "width=16")
    tab, _ = conftest.run_ok("tabular/mlp", "data=wine", "hidden=16", "--out", tmp_path / "tab", budget="3steps")
    assert "a tabular/mlp run; this recipe fine-tunes from" in run_bad("contrastive/simclr", f"weights={tab['run_dir']}")
    assert "no such run folder" in run_bad("contrastive/simclr", f"weights={tmp_path / 'nope'}")


def _write_images(folder, n, size=12, corrupt=False):
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(len(str(folder)))
    for i in range(n):
        colour = (torch.rand(3, generator=g) * 255).byte().tolist()
        Image.new("RGB", (size, size), tuple(colour)).save(folder / f"{i}.png")
    if corrupt:
        (folder / "broken.png").write_bytes(b"not a png")


@pytest.mark.slow
def test_byol_on_own_unlabelled_and_labelled_folders(tmp_path):
    _write_images(tmp_path / "unlabelled" / "batch1", 20)
    (tmp_path / "unlabelled" / "notes.txt").write_text("skipped, and counted")
    for cls in ("red", "blue"):
        _write_images(tmp_path / "labelled" / cls, 10)
    summary, proc = run_ok("contrastive/byol", f"data={tmp_path / 'unlabelled'}", f"eval_data={tmp_path / 'labelled'}",
                           "width=8", "proj_hidden=32", "batch_size=8", "eval_every=0")
    assert summary["status"] == "ok" and "skipped 1 non-image files" in proc.stdout
    sizes = [int(s.split()[0]) for s in summary["evaluation"].split(": ")[1].split(" / ")]
    assert sum(sizes) == 20 and min(sizes) >= 1  # labelled / validation / test of the 20 labelled images
    assert "pretraining on 20 unlabelled images" in summary["split"]
    assert "views of the" not in summary["augment"]  # BYOL's views keep the images' size
    summary, _ = run_ok("contrastive/simclr", f"data={tmp_path / 'labelled'}", "width=8", "proj_hidden=32",
                        "batch_size=8", "eval_every=0", "model=zoo-resnet", "view_size=8")
    assert summary["status"] == "ok" and "; 8 px views of the 32 px images" in summary["augment"]


def test_bad_inputs(tmp_path):
    (tmp_path / "empty").mkdir()
    for cls in ("a", "b"):
        _write_images(tmp_path / "labelled" / cls, 4)
    assert "no images found" in run_bad("contrastive/simclr", f"data={tmp_path / 'empty'}",
                                        f"eval_data={tmp_path / 'labelled'}")
    _write_images(tmp_path / "unlabelled", 4, corrupt=True)
    assert "broken.png" in run_bad("contrastive/simclr", f"data={tmp_path / 'unlabelled'}",
                                   f"eval_data={tmp_path / 'labelled'}")
    assert "nope" in run_bad("contrastive/byol", f"data={tmp_path / 'labelled'}", f"eval_data={tmp_path / 'nope'}")
    assert "view_size" in run_bad("contrastive/simclr", "view_size=-2")
    assert "view_size=2: the zoo-net backbone cannot take views this small" in run_bad("contrastive/simclr",
                                                                                       "view_size=2")


def test_doctor_byol_on_digits_checks_queries_against_pretraining_images(tmp_path, capsys):
    """``zoo doctor`` in-process: the kNN/probe queries are checked against the pretraining images, and the
    training checks pass (a batch of 8: BYOL memorises it within the 20 steps of the overfit check)."""
    import json

    from recipe_zoo.cli import main

    code = main(["doctor", "contrastive/byol", "width=8", "proj_hidden=32", "batch_size=8", "--steps", "20",
                 "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().out[-3000:]
    (folder,) = (tmp_path / "doctor" / "contrastive" / "byol").iterdir()
    assert (folder / "report.md").is_file()
    found = json.loads((folder / "findings.json").read_text())
    by_check = {f["check"]: f for f in found}
    n_val = len(images.load_digits_splits().val_y)  # the validation queries, never the test ones
    assert by_check["data/leakage"]["severity"] == "ok" and f"({n_val} checked)" in by_check["data/leakage"]["message"]
    assert "overfit/one-batch" in by_check and not [f for f in found if f["severity"] == "error"]


# ---------------------------------------------------------------------------------------------
# The protocol: pretraining on train minus validation; kNN on validation while training; test once, at the end
# ---------------------------------------------------------------------------------------------

def _train_in_process(out, seed=0):
    """contrastive/simclr on digits in this process, 4 steps; a SimpleRun keeps its rows and split."""
    from recipe_zoo.core.api import SimpleRun
    from recipe_zoo.core.budget import parse_budget
    from recipe_zoo.core.precision import seed_everything

    out.mkdir(parents=True)
    run = SimpleRun(budget=parse_budget("4steps"), seed=seed, dir=out, device="cpu", log=lambda s: None,
                    spec=SimpleNamespace(name="contrastive/simclr"))
    seed_everything(seed)
    cfg = simclr.ContrastiveConfig(width=8, proj_hidden=32, batch_size=32, eval_every=0.5)
    with torch_state_kept():  # as `zoo run` leaves the caller's torch switches
        return simclr.train(cfg, run), run


def test_garbage_test_labels_change_nothing_before_the_end(tmp_path, monkeypatch):
    honest, run = _train_in_process(tmp_path / "honest")
    conftest.garble_digits_test(monkeypatch)
    garbled, garbled_run = _train_in_process(tmp_path / "garbled")
    assert len(run.eval_rows) == 2
    assert conftest.without_timing(run.eval_rows) == conftest.without_timing(garbled_run.eval_rows)
    assert not [k for r in run.eval_rows for k in r if k.startswith("test")]
    assert garbled["val_knn_accuracy"] == honest["val_knn_accuracy"]
    assert garbled["test_knn_accuracy"] != honest["test_knn_accuracy"]
    assert honest["test_knn_accuracy_ci_low"] <= honest["test_knn_accuracy"] <= honest["test_knn_accuracy_ci_high"]
    monkeypatch.undo()  # the real test images again
    _, other_seed = _train_in_process(tmp_path / "seed1", seed=1)
    assert other_seed.splits == run.splits and set(run.splits) == {"train", "validation", "test"}


def test_pretraining_never_sees_validation_or_test_images(tmp_path):
    reported = {}
    run = SimpleNamespace(log=lambda s: None, report=reported.__setitem__)
    on_digits = data.load_data(simclr.ContrastiveConfig(), run)
    splits = on_digits.eval
    assert torch.equal(on_digits.pretrain_x, splits.train_x) and on_digits.pretrain_keys == splits.keys["train"]
    held = set(splits.keys["validation"]) | set(splits.keys["test"])
    assert not held & set(image_splits.content_keys(on_digits.pretrain_x))
    # an unlabelled folder that holds copies of the labelled images: those of validation and test stay out
    for cls in ("red", "blue"):
        _write_images(tmp_path / "labelled" / cls, 10)
    shutil.copytree(tmp_path / "labelled", tmp_path / "unlabelled" / "copies")
    _write_images(tmp_path / "unlabelled" / "more", 5)
    cfg = simclr.ContrastiveConfig(data=str(tmp_path / "unlabelled"), eval_data=str(tmp_path / "labelled"))
    own = data.load_data(cfg, run)
    n_held = len(own.eval.val_y) + len(own.eval.test_y)
    assert len(own.pretrain_x) == 25 - n_held and n_held >= 2
    assert not {f"copies/{k}" for k in own.eval.keys["validation"] + own.eval.keys["test"]} & set(own.pretrain_keys)
    assert reported == {"image_size": 32}  # 12 px images: the smallest size the rule gives


# ---------------------------------------------------------------------------------------------
# Bad input, one table: exit 2, one line naming the file (and the item or key), no ok row
# ---------------------------------------------------------------------------------------------

def _contrastive_bad_case(case: str, tmp):
    """(recipe args, needles the error line must hold, budget) for one bad input."""
    labelled = tmp / "labelled"
    for cls in ("a", "b"):
        _write_images(labelled / cls, 4, size=8)
    _write_images(tmp / "unlabelled" / "batch1", 6, size=8)
    own = [f"data={tmp / 'unlabelled'}", f"eval_data={labelled}"]
    if case == "missing_data":
        return [f"data={tmp / 'nowhere'}"], ["nowhere", "not a vision dataset"], "3steps"
    if case == "missing_unlabelled_folder":
        return [f"data={tmp / 'nowhere'}", f"eval_data={labelled}"], ["nowhere", "folder not found"], "3steps"
    if case == "unlabelled_is_a_file":
        (tmp / "list.txt").write_text("0.png\n")
        return [f"data={tmp / 'list.txt'}", f"eval_data={labelled}"], ["list.txt", "not a folder"], "3steps"
    if case == "empty_unlabelled_folder":
        (tmp / "empty").mkdir()
        return [f"data={tmp / 'empty'}", f"eval_data={labelled}"], ["empty", "no images found"], "3steps"
    if case == "corrupt_unlabelled_image":
        (tmp / "unlabelled" / "batch1" / "3.png").write_bytes(b"\xff\xfe\xfa garbage")
        return own, [str(tmp / "unlabelled" / "batch1" / "3.png"), "cannot decode image"], "3steps"
    if case == "truncated_unlabelled_image":
        path = tmp / "unlabelled" / "big.png"
        Image.frombytes("RGB", (32, 32), bytes(range(256)) * 12).save(path)
        path.write_bytes(path.read_bytes()[:100])
        return own, [str(path), "cannot decode image"], "3steps"
    if case == "corrupt_eval_image":
        (labelled / "b" / "2.png").write_bytes(b"")
        return own, [str(labelled / "b" / "2.png"), "cannot decode image"], "3steps"
    if case == "missing_eval_folder":
        return [f"data={tmp / 'unlabelled'}", f"eval_data={tmp / 'gone'}"], ["gone", "folder not found"], "3steps"
    if case == "eval_without_class_subfolders":
        return ([f"data={tmp / 'unlabelled'}", f"eval_data={tmp / 'unlabelled' / 'batch1'}"],
                [str(tmp / "unlabelled" / "batch1"), "no class subfolders"], "3steps")
    if case == "labelled_data_with_corrupt_image":  # no eval_data: data is the labelled folder itself
        (labelled / "a" / "1.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        return [f"data={labelled}"], [str(labelled / "a" / "1.png"), "cannot decode image"], "3steps"
    if case == "typo_key":
        return [*own, "temprature=0.1"], ["unknown key 'temprature'", "did you mean 'temperature'?"], "3steps"
    if case == "bad_int":
        return [*own, "batch_size=abc"], ["batch_size='abc'", "not a valid int"], "3steps"
    if case == "bad_float":
        return [*own, "lr=fast"], ["lr='fast'", "not a valid float"], "3steps"
    if case == "bad_choice":
        return [*own, "optimizer=sgd"], ["optimizer='sgd'", "must be one of"], "3steps"
    if case == "bad_value":
        return [*own, "temperature=0"], ["temperature='0'", "must be > 0"], "3steps"
    if case == "zero_budget":
        return own, ["'0s'", "must be positive"], "0s"
    if case == "negative_budget":
        return own, ["'-5'", "expected a number and a unit"], "-5"
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "missing_data", "missing_unlabelled_folder", "unlabelled_is_a_file", "empty_unlabelled_folder",
    "corrupt_unlabelled_image", "truncated_unlabelled_image", "corrupt_eval_image", "missing_eval_folder",
    "eval_without_class_subfolders", "labelled_data_with_corrupt_image", "typo_key", "bad_int", "bad_float",
    "bad_choice", "bad_value", "zero_budget", "negative_budget"])
def test_bad_input_table(case, tmp_path, capfd):
    args, needles, budget = _contrastive_bad_case(case, tmp_path)
    conftest.bad_input(capfd, ["contrastive/simclr", *args, "width=8", "proj_hidden=32", "image_size=8"],
                       tmp_path / "runs", *needles, budget=budget)
