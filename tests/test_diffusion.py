"""Diffusion: the samplers land exactly on the data under an oracle network, classifier-free guidance
mixes as defined, the fid_zoo features respond to corruption, and ``diffusion/*`` end to end on
bundled digits and an own image folder, with their bad inputs; the protocol: the FID while training reads
validation images, the test FID is scored once at the end."""
import csv
import functools
import json
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

import conftest
from recipe_zoo.recipes import images
from recipe_zoo.recipes.diffusion import data as diffusion_data
from recipe_zoo.recipes.diffusion import ddpm, models, sampling
from recipe_zoo.recipes.diffusion.data import to_model_range
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import torch_state_kept

run_ok = functools.partial(conftest.run_ok, budget="20steps")
run_bad = functools.partial(conftest.run_bad, budget="2steps")
TINY = ["width=8", "n_samples=40", "n_real=40", "sample_steps=3", "grid=4"]


class Oracle(torch.nn.Module):
    """The exact network output for data that is one point ``c``: what a perfect model predicts."""

    def __init__(self, c: torch.Tensor, kind: str, scheduler=None):
        super().__init__()
        self.c, self.kind, self.scheduler = c, kind, scheduler

    def forward(self, x, t, class_labels=None):
        if self.kind == "velocity":  # x_t = (1 - t) c + t eps  =>  v = eps - c = (x_t - c) / t
            s = (t / 1000).view(-1, 1, 1, 1)
            return SimpleNamespace(sample=(x - self.c) / s)
        ab = self.scheduler.alphas_cumprod[t.long()].view(-1, 1, 1, 1)
        eps = (x - ab.sqrt() * self.c) / (1 - ab).sqrt()
        out = eps if self.kind == "epsilon" else ab.sqrt() * eps - (1 - ab).sqrt() * self.c
        return SimpleNamespace(sample=out)


@pytest.mark.parametrize("method,kind,sampler", [("flow", "velocity", "euler"), ("flow", "velocity", "heun"),
                                                  ("ddpm", "epsilon", "ddim"), ("ddpm", "v", "ddim")])
def test_samplers_reach_the_data_under_an_oracle(method, kind, sampler):
    cfg = ddpm.DiffusionConfig(method=method, prediction="v" if kind == "v" else "epsilon", sampler=sampler,
                              sample_steps=10, sample_batch=8)
    c = torch.linspace(-0.8, 0.8, 16).view(1, 1, 4, 4)
    model = Oracle(c, kind, ddpm.noise_scheduler(cfg))
    out = ddpm.sample(model, cfg, 8, (1, 4, 4), None, 0, torch.device("cpu"), seed=0)
    assert out.shape == (8, 1, 4, 4)
    assert torch.allclose(out, c.expand_as(out), atol=2e-3)


def test_flow_draws_logit_normal_times_by_default_and_the_mnist_reference_keeps_uniform():
    """SD3's logit-normal draw puts ~73% of training times in the middle half of the path (uniform: 50%); the
    reference keeps the uniform draw its rows were measured with."""
    from recipe_zoo import references

    seen = []

    class Record(torch.nn.Module):
        def forward(self, x, t, class_labels=None):
            seen.append(t / 1000)
            return SimpleNamespace(sample=torch.zeros_like(x))

    assert ddpm.DiffusionConfig().flow_time == "logit_normal"
    x0 = torch.zeros(20_000, 1, 1, 1)
    middle = {}
    for draw in ("logit_normal", "uniform"):
        torch.manual_seed(0)
        ddpm.flow_loss(Record(), x0, None, ddpm.DiffusionConfig(flow_time=draw))
        t = seen.pop()
        assert 0 < t.min() and t.max() < 1
        middle[draw] = ((t > 0.25) & (t < 0.75)).float().mean().item()
    assert middle["logit_normal"] == pytest.approx(0.73, abs=0.02) and middle["uniform"] == pytest.approx(0.5, abs=0.02)
    assert "flow_time=uniform" in references.find("diffusion/flow", "mnist").overrides


def test_guidance_mixes_conditional_and_unconditional():
    class ByLabel(torch.nn.Module):
        def forward(self, x, t, class_labels=None):
            return SimpleNamespace(sample=x * 0 + class_labels.view(-1, 1, 1, 1).float())

    x, labels, null = torch.zeros(3, 1, 2, 2), torch.tensor([1, 2, 3]), 10
    out = sampling.guided(ByLabel(), x, torch.zeros(3), labels, null, guidance=2.0)  # a time per image
    assert torch.allclose(out[:, 0, 0, 0], 10 + 2.0 * (labels.float() - 10))  # uncond + g (cond - uncond)
    # guidance 1: uncond + (cond - uncond) on small integers, exact in float32
    assert torch.equal(sampling.guided(ByLabel(), x, torch.zeros(3), labels, null, 1.0)[:, 0, 0, 0], labels.float())
    dropped = ddpm.drop_labels(torch.zeros(20000, dtype=torch.long), null, 0.1, torch.Generator().manual_seed(0))
    assert 0.09 < (dropped == null).float().mean() < 0.11 and set(dropped.tolist()) == {0, null}


def test_sampler_must_match_the_method():
    with pytest.raises(ZooError, match="sampler=ddim"):
        ddpm.resolve_sampler(ddpm.DiffusionConfig(method="flow", sampler="ddim"))
    with pytest.raises(ZooError, match="sampler=heun"):
        ddpm.resolve_sampler(ddpm.DiffusionConfig(method="ddpm", sampler="heun"))
    assert ddpm.resolve_sampler(ddpm.DiffusionConfig(method="flow")) == ("heun", 25)
    assert ddpm.network_evaluations("heun", 25) == 49 and ddpm.network_evaluations("ddim", 50) == 50


@pytest.mark.slow
@pytest.mark.own_cache  # it trains the network itself: the session's shared cache may hold it already
def test_fid_zoo_features_rank_corruption_and_are_cached():
    from recipe_zoo.recipes.images import load_digits_splits

    data = load_digits_splits()
    logs = []
    net, acc = models.feature_net(data, logs.append)
    assert acc > 0.9 and "trained a classifier" in logs[-1]
    real = to_model_range(data.test_x)
    ref = net.embed(real)
    g = torch.Generator().manual_seed(0)
    train = to_model_range(data.train_x[:360])
    # Noise of 0.2 sits within the resolution of an FID over 360 images (0.99 against 1.02 clean with one trained
    # classifier, 1.35 against 0.93 with another): the levels ranked are those the metric resolves on any machine
    scores = [ddpm.fid(net.embed((train + s * torch.randn(train.shape, generator=g)).clamp(-1, 1)), ref)
              for s in (0.0, 0.5, 1.0)]
    assert scores == sorted(scores) and scores[-1] > 10 * scores[0]  # more noise, farther from the real images
    again, acc2 = models.feature_net(data, logs.append)
    assert "cached classifier" in logs[-1] and acc2 == acc and np.allclose(again.embed(real), ref)


def test_inception_weights_refuse_a_pickle_with_code(tmp_path):
    evil = tmp_path / "inception.pth"
    with open(evil, "wb") as f:
        pickle.dump({"w": SimpleNamespace(x=1)}, f)  # loading it would construct an arbitrary object
    with pytest.raises(ZooError, match="inception_weights=.*inception.pth: refused to load"):
        models.InceptionFeatures(str(evil), torch.device("cpu"))
    with pytest.raises(ZooError, match="file not found"):
        models.InceptionFeatures(str(tmp_path / "missing.pth"), torch.device("cpu"))


def test_torch_fidelity_loads_the_tensors_checked_not_the_path_again(tmp_path, monkeypatch):
    """One reader: the safe loader reads inception_weights once; torch-fidelity's own torch.load (weights_only=False)
    gets a copy of those tensors in a private folder, so a file swapped between the two reads is never loaded."""
    import torch_fidelity.feature_extractor_inceptionv3 as fidelity

    path = tmp_path / "pt_inception.pth"
    torch.save({"fc.weight": torch.ones(2, 2)}, path)
    seen = []
    real = fidelity.torch.load  # torch.load itself: the safe read goes through it too, with weights_only=True

    def spy(f, *args, **kwargs):
        if kwargs.get("weights_only") is False:  # torch-fidelity's read
            path.write_bytes(b"swapped after the check")  # the user's file changes between the two reads
            seen.append(str(f))
        return real(f, *args, **kwargs)

    monkeypatch.setattr(fidelity.torch, "load", spy)
    with pytest.raises(ZooError, match="not torch-fidelity's Inception-v3 weights"):  # the checked tensors, loaded
        models.InceptionFeatures(str(path), torch.device("cpu"))
    (where,) = seen
    assert "zoo-inception-" in where and where != str(path)


@pytest.mark.slow
def test_flow_cfg_end_to_end_on_digits(tmp_path):
    summary, proc = run_ok("diffusion/flow-cfg", *TINY, "--out", tmp_path)
    assert summary["metric"] == "test_fid_zoo"
    assert summary["benchmark"] == "digits:conditional=True:n_samples=40:n_real=40"  # KEY_FIELDS off their defaults
    assert "guidance 1.5" in summary["sampling"] and summary["fid_samples"].startswith("40 generated vs 40 real")
    run_dir = tmp_path / "diffusion" / "flow-cfg"
    (run,) = list(run_dir.iterdir())
    with Image.open(run / "samples.png") as im:
        assert im.size[0] > 8 and im.size[1] > 8 * 9  # a row of samples per class (10 classes)
    metrics = json.loads((run / "summary.json").read_text())["metrics"]
    assert {"test_fid_zoo_floor", "val_fid_zoo_floor", "val_fid_zoo"} <= set(metrics) and float(summary["value"]) > 0
    assert metrics["test_fid_zoo_ci_low"] <= metrics["test_fid_zoo"] <= metrics["test_fid_zoo_ci_high"]


@pytest.mark.slow
def test_ddpm_on_an_own_folder_and_a_corrupt_image(tmp_path):
    folder = tmp_path / "imgs"
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (folder / cls).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / cls / f"{i}.png")
    summary, _ = run_ok("diffusion/ddpm", f"data={folder}", "image_size=16", "levels=2", *TINY, "sample_steps=2",
                        "--out", tmp_path / "runs")
    assert summary["status"] == "ok" and "ddim, 2 steps" in summary["sampling"]
    with open(next((tmp_path / "runs" / "diffusion" / "ddpm").iterdir()) / "split.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["item"] for r in rows) == sorted(f"{c}/{i}.png" for c in ("a", "b") for i in range(12))
    assert {r["split"] for r in rows} == {"train", "validation", "test"}
    (folder / "a" / "0.png").write_bytes(b"not a png")
    assert "0.png" in run_bad("diffusion/ddpm", f"data={folder}", *TINY)


def test_bad_values_are_refused_before_training(tmp_path):
    run = SimpleNamespace(device="cpu", log=print, budget=None)
    for bad, match in ((dict(n_samples=1), "n_samples=1"), (dict(cond_drop=1.0), "cond_drop=1.0"),
                       (dict(data=str(tmp_path / "nowhere")), "not a diffusion dataset")):
        with pytest.raises(ZooError, match=match):
            with torch_state_kept():  # train sets its speed switches before it refuses the config
                ddpm.train(ddpm.DiffusionConfig(**bad), run)
    for bad, match in ((dict(val_fraction=0.0), "val_fraction=0.0"), (dict(test_fraction=1.5), "test_fraction=1.5"),
                       (dict(val_fraction=0.5, test_fraction=0.5), "leave images to train on")):
        with pytest.raises(ZooError, match=match):
            with torch_state_kept():  # train sets its speed switches before it refuses the config
                ddpm.train(ddpm.DiffusionConfig(**bad), run)
    with pytest.raises(ZooError, match="width=12"):
        models.build_unet(ddpm.DiffusionConfig(), 12, 1, 8, 10)
    with pytest.raises(ZooError, match="levels=6"):  # 16 px halves at most 4 times
        models.build_unet(ddpm.DiffusionConfig(levels=6), 8, 3, 16, 2)
    data = SimpleNamespace(train_x=torch.zeros(4, 1, 8, 8, dtype=torch.uint8), train_y=torch.zeros(4, dtype=torch.long),
                           val_x=torch.zeros(2, 1, 8, 8, dtype=torch.uint8), val_y=torch.zeros(2, dtype=torch.long),
                           name="one")
    with pytest.raises(ZooError, match="one class"):
        models.feature_net(data, print)


@pytest.mark.slow
def test_width_grows_with_the_budget():
    from recipe_zoo.core.budget import parse_budget

    from recipe_zoo.core import devices

    cpu = devices.cpu(peak=1.5e11, memory=1e10)  # a 2-core CPU's peak, given: a measured one moves with the load

    def width(budget, **cfg):
        logs = []
        w, _ = models.choose_width(ddpm.DiffusionConfig(**cfg), parse_budget(budget), 1, 8, 10, cpu, logs.append)
        return w, logs

    short, logs = width("1s")
    long_, _ = width("1h")
    assert short < long_ and "GFLOP per step" in logs[0]
    assert width("100steps")[0] == 32 and width("1h", width=24)[0] == 24
    assert width("1h", min_steps=10**9)[0] == models.WIDTHS[-1]  # nothing fits: the narrowest


@pytest.mark.slow
def test_doctor_sees_the_digits_and_finds_no_error(tmp_path, capsys, monkeypatch):
    """``zoo doctor`` in-process: run.inspect's data checks, then the training checks, without an error.

    The fid_zoo classifier (~20 s on a CPU, used only after training) is stubbed. A loss that draws its own
    noise passes the one-batch check once it halves; flow matching's floor is high (batch 64, lr 1e-3: -34% in
    20 steps, -50% near step 50, -63% at 200), so the test trains 30 steps of batch 32 at 1e-2 (-61%)."""
    from recipe_zoo.cli import main

    monkeypatch.setattr(ddpm, "feature_net", lambda data, log: (models.FeatureNet(data.train_x.shape[1], 10), 0.0))
    code = main(["doctor", "diffusion/flow", *TINY, "batch_size=32", "lr=1e-2", "--steps", "30",
                 "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().out[-3000:]
    (folder,) = (tmp_path / "doctor" / "diffusion" / "flow").iterdir()
    n_val = len(diffusion_data.load_data(ddpm.DiffusionConfig(), SimpleNamespace(log=print)).val_y)  # not test
    assert f"- validation: {n_val} rows, inputs of shape ({n_val}, 1, 8, 8)" in (folder / "report.md").read_text()
    findings = json.loads((folder / "findings.json").read_text())
    severity = {f["check"]: f["severity"] for f in findings}
    assert severity["data/balance"] == "ok" and severity["data/leakage"] == "ok"
    assert "overfit/one-batch" in severity and not [f for f in findings if f["severity"] == "error"], findings


# ---------------------------------------------------------------------------------------------
# The protocol: validation FID while training, the test FID once at the end
# ---------------------------------------------------------------------------------------------

def test_split_is_hash_chosen_and_the_same_in_any_order():
    cfg = ddpm.DiffusionConfig()
    data = diffusion_data.load_data(cfg, SimpleNamespace(log=print))
    keys = {p: set(data.keys[p]) for p in ("train", "validation", "test")}
    assert not (keys["train"] & keys["validation"] or keys["train"] & keys["test"] or keys["validation"] & keys["test"])
    assert sum(map(len, data.keys.values())) == 1797 and len(data.train_y) + len(data.val_y) + len(data.test_y) == 1797
    assert 0.07 < len(data.val_y) / 1797 < 0.13 and 0.07 < len(data.test_y) / 1797 < 0.13  # 10% and 10%
    x, y, classes = images.digits_arrays()
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    shuffled = diffusion_data.hash_split_arrays(x[order], y[order], classes, "digits", cfg.val_fraction,
                                                cfg.test_fraction)
    assert {p: set(k) for p, k in shuffled.keys.items()} == keys


def _train_in_process(out, seed=0):
    """diffusion/flow on digits in this process, 4 steps (the fid_zoo network is trained once, then cached: its
    key is the train and validation images)."""
    from recipe_zoo.core.api import SimpleRun
    from recipe_zoo.core.budget import parse_budget
    from recipe_zoo.core.precision import seed_everything

    out.mkdir(parents=True)
    run = SimpleRun(budget=parse_budget("4steps"), seed=seed, dir=out, device="cpu", log=lambda s: None,
                    spec=SimpleNamespace(name="diffusion/flow"))
    seed_everything(seed)
    cfg = ddpm.DiffusionConfig(method="flow", width=8, n_samples=40, n_real=40, sample_steps=2, grid=0,
                               eval_every=0.5)
    with torch_state_kept():  # as `zoo run` leaves the caller's torch switches
        return ddpm.train(cfg, run), run


@pytest.mark.slow
def test_garbage_test_images_change_nothing_before_the_end(tmp_path, monkeypatch):
    """Noise for test images: every validation row is the same, only the test FID moves; the interval brackets
    the value (a trained feature network: an untrained one's features are near-constant, FID ~1e-4, and every
    bootstrap FID lies above it); the split is the same for another seed."""
    honest, run = _train_in_process(tmp_path / "honest")
    split = diffusion_data.hash_split_arrays

    def garbage(*args, **kwargs):
        data = split(*args, **kwargs)
        data.test_x = torch.randint(0, 256, data.test_x.shape, generator=torch.Generator().manual_seed(1)).byte()
        return data

    monkeypatch.setattr(diffusion_data, "hash_split_arrays", garbage)
    garbled, garbled_run = _train_in_process(tmp_path / "garbled")
    assert len(run.eval_rows) == 2
    assert conftest.without_timing(run.eval_rows) == conftest.without_timing(garbled_run.eval_rows)
    assert not [k for r in run.eval_rows for k in r if k.startswith("test")]
    assert garbled["val_fid_zoo"] == honest["val_fid_zoo"] and garbled["test_fid_zoo"] != honest["test_fid_zoo"]
    assert honest["test_fid_zoo_ci_low"] <= honest["test_fid_zoo"] <= honest["test_fid_zoo_ci_high"]
    monkeypatch.setattr(diffusion_data, "hash_split_arrays", split)
    _, other_seed = _train_in_process(tmp_path / "seed1", seed=1)
    assert other_seed.splits == run.splits


# ---------------------------------------------------------------------------------------------
# Bad input, one table: exit 2, one line naming the file (and the item or key), no ok row
# ---------------------------------------------------------------------------------------------

def _class_folder(root, classes=("a", "b"), n=10, size=8):
    rng = np.random.default_rng(0)
    for cls in classes:
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(root / cls / f"{i}.png")
    return root


def _diffusion_bad_case(case: str, tmp):
    """(recipe args, needles the error line must hold, budget) for one bad input."""
    good = _class_folder(tmp / "good")
    if case == "missing_folder":
        return [f"data={tmp / 'nowhere'}"], ["nowhere", "not a diffusion dataset"], "3steps"
    if case == "file_not_folder":
        (tmp / "faces.zip").write_bytes(b"PK\x03\x04")
        return [f"data={tmp / 'faces.zip'}"], ["faces.zip", "not a folder"], "3steps"
    if case == "empty_folder":
        (tmp / "empty").mkdir()
        return [f"data={tmp / 'empty'}"], ["empty", "no class subfolders"], "3steps"
    if case == "no_class_subfolders":
        (tmp / "flat").mkdir()
        Image.new("RGB", (8, 8)).save(tmp / "flat" / "0.png")
        return [f"data={tmp / 'flat'}"], ["flat", "no class subfolders"], "3steps"
    if case == "class_folders_without_images":
        for cls in ("a", "b"):
            (tmp / "noimg" / cls).mkdir(parents=True)
        return [f"data={tmp / 'noimg'}"], ["noimg", "no images found"], "3steps"
    if case == "corrupt_png":
        (good / "a" / "3.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
        return [f"data={good}"], [str(good / "a" / "3.png"), "cannot decode image"], "3steps"
    if case == "truncated_png":
        full = good / "b" / "1.png"
        Image.fromarray(np.random.default_rng(1).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(full)
        full.write_bytes(full.read_bytes()[:200])
        return [f"data={good}"], [str(full), "cannot decode image"], "3steps"
    if case == "corrupt_jpg":
        (good / "b" / "9.jpg").write_bytes(b"\xff\xd8\xff\xdb" + b"\xff" * 10)
        return [f"data={good}"], [str(good / "b" / "9.jpg"), "cannot decode image"], "3steps"
    if case == "too_few_held_out":
        _class_folder(tmp / "tiny", n=4)
        return ([f"data={tmp / 'tiny'}"], [str(tmp / "tiny"), "test image(s); the FID needs at least 2 of each"],
                "3steps")
    if case == "one_class":
        _class_folder(tmp / "mono", classes=("only",), n=20)
        return [f"data={tmp / 'mono'}"], [f"data={tmp / 'mono'}", "one class folder ('only')"], "3steps"
    if case == "missing_inception_weights":
        return ([f"data={good}", f"inception_weights={tmp / 'pt_inception.pth'}"],
                ["pt_inception.pth", "file not found"], "3steps")
    if case == "corrupt_inception_weights":
        (tmp / "pt_inception.pth").write_bytes(b"\xff\xfe\xfa")
        return ([f"data={good}", f"inception_weights={tmp / 'pt_inception.pth'}"],
                [str(tmp / "pt_inception.pth"), "refused to load"], "3steps")  # core.checkpoint.read_weights
    if case == "wrong_inception_weights":  # a plain state dict, but not of an Inception-v3
        torch.save({"fc.weight": torch.zeros(2, 2)}, tmp / "other.pth")
        return ([f"data={good}", f"inception_weights={tmp / 'other.pth'}"],
                [str(tmp / "other.pth"), "not torch-fidelity's Inception-v3 weights"], "3steps")
    if case == "typo_key":
        return [f"data={good}", "sampel_steps=3"], ["unknown key 'sampel_steps'", "did you mean 'sample_steps'?"], \
            "3steps"
    if case == "bad_int":
        return [f"data={good}", "batch_size=abc"], ["batch_size='abc'", "not a valid int"], "3steps"
    if case == "bad_float":
        return [f"data={good}", "lr=fast"], ["lr='fast'", "not a valid float"], "3steps"
    if case == "bad_choice":
        return [f"data={good}", "sampler=dpm"], ["sampler='dpm'", "must be one of"], "3steps"
    if case == "bad_value":
        return [f"data={good}", "cond_drop=1.0"], ["cond_drop='1.0'", "must be in [0, 1)"], "3steps"
    if case == "zero_budget":
        return [f"data={good}"], ["'0s'", "must be positive"], "0s"
    if case == "negative_budget":
        return [f"data={good}"], ["'-5'", "expected a number and a unit"], "-5"
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "missing_folder", "file_not_folder", "empty_folder", "no_class_subfolders", "class_folders_without_images",
    "corrupt_png", "truncated_png", "corrupt_jpg", "too_few_held_out", "one_class", "missing_inception_weights",
    "corrupt_inception_weights", "wrong_inception_weights", "typo_key", "bad_int", "bad_float", "bad_choice",
    "bad_value", "zero_budget", "negative_budget"])
def test_bad_input_table(case, tmp_path, capfd):
    args, needles, budget = _diffusion_bad_case(case, tmp_path)
    conftest.bad_input(capfd, ["diffusion/ddpm", *args, "image_size=8", "levels=2", *TINY], tmp_path / "runs",
                       *needles, budget=budget)


def test_a_diffusion_run_fine_tunes_from_another_with_its_unet(tmp_path, capfd):
    """weights=RUN: the source's EMA U-Net and objective are kept; sampled before the first step with the same
    seed on the source's data it scores the source's validation fid_zoo to 1e-6; the card names the source. Another
    objective (ddpm from a flow run), another image size, another recipe's run: one line."""
    import json

    from conftest import train_in_process

    tiny = [*TINY, "grid=0", "precision=fp32"]
    source = train_in_process(tmp_path / "pre", "diffusion/flow", *tiny, budget="4steps")
    before = json.loads((source / "summary.json").read_text())["metrics"]
    tuned = train_in_process(tmp_path / "same", "diffusion/flow", *tiny, f"weights={source}", budget="2steps")
    after = json.loads((tuned / "summary.json").read_text())
    assert after["metrics"]["val_fid_zoo_start"] == pytest.approx(before["val_fid_zoo"], abs=1e-6)
    assert after["benchmark"].endswith(":fine-tuned")
    assert json.loads((tuned / "model.json").read_text())["source"]["recipe"] == "diffusion/flow"
    conftest.bad_input(capfd, ["diffusion/ddpm", *tiny, f"weights={source}"], tmp_path / "bad",
                       "method=ddpm: the source run", "was trained with method=flow; fine-tune it with diffusion/flow")
    conftest.bad_input(capfd, ["diffusion/flow", *tiny, "image_size=16", "levels=2", f"weights={source}"],
                       tmp_path / "bad", "levels=2: the source run", "was trained with levels=3")
    conftest.bad_input(capfd, ["diffusion/flow", *tiny, "image_size=16", f"weights={source}"], tmp_path / "bad",
                       "trained on 8 px images with 1 channel(s), and this data is 16 px with 1")
    # a class subset (classes=): its test images are the source's test images of those classes, never its training
    subset = train_in_process(tmp_path / "sub", "diffusion/flow", *tiny, "classes=1,3,7", f"weights={source}",
                              budget="2steps")
    kept = json.loads((subset / "summary.json").read_text())
    assert "classes 1, 3, 7 only" in kept["extra"]["split"] and kept["benchmark"].startswith("digits:classes=1,3,7:")
    assert json.loads((subset / "model.json").read_text())["source"]["run_id"] == source.name
    assert set(_split_items(subset, "test")) < set(_split_items(source, "test"))
    # a larger test share would score the fine-tune on images its source trained on: refused, counted
    conftest.bad_input(capfd, ["diffusion/flow", *tiny, "test_fraction=0.4", f"weights={source}"], tmp_path / "bad",
                       "test images were in the source run's training or validation data")
    conftest.bad_input(capfd, ["diffusion/flow", *tiny, "classes=1,ten"], tmp_path / "bad",
                       "classes=1,ten: 'ten' is not a class of digits (its classes: 0, 1, 2")


def _split_items(run_dir, part: str) -> list[str]:
    import csv

    with open(run_dir / "split.csv", newline="") as f:
        return [row["item"] for row in csv.DictReader(f) if row["split"] == part]
