"""diffusion: a finished run generates (zoo predict n=64 [label=K]): PNGs and a grid, a CSV row per image, the same
images bitwise for the same seed; bad options in one line; the diffusers export loads back and generates what
zoo predict generates."""
import csv
import json

import numpy as np
import pytest
import torch

from conftest import predict_bad, train_in_process

TINY = ["width=8", "n_samples=20", "n_real=20", "sample_steps=2", "grid=4"]


def _train(out, recipe, *args, budget="3steps", cache=None):
    return train_in_process(out, recipe, *TINY, *args, budget=budget, cache=cache)  # cache: the fid_zoo classifier


@pytest.fixture(scope="module")
def ddpm_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("ddpm"), "diffusion/ddpm", cache=tmp_path_factory.getbasetemp() / "cache")


@pytest.fixture(scope="module")
def flow_cfg_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("flow_cfg"), "diffusion/flow-cfg", "sample_steps=3",
                  cache=tmp_path_factory.getbasetemp() / "cache")  # one fid_zoo classifier for both runs


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_the_run_saves_a_card(ddpm_run, flow_cfg_run):
    from diffusers import UNet2DModel

    plain = json.loads((ddpm_run / "model.json").read_text())
    assert plain["recipe"] == "diffusion/ddpm" and plain["task"] == "generation" and plain["selected"] == "ema"
    assert plain["classes"] is None and plain["preprocess"]["image_size"] == 8 and plain["preprocess"]["channels"] == 1
    assert plain["evaluation"] | {"eta": 0} == {"method": "ddpm", "sampler": "ddim", "steps": 2, "eta": 0,
                                               "guidance": None, "null_class": None, "seed": 0}
    cond = json.loads((flow_cfg_run / "model.json").read_text())
    assert cond["classes"] == [str(i) for i in range(10)] and cond["unet"]["num_class_embeds"] == 11
    assert cond["evaluation"]["sampler"] == "heun" and cond["evaluation"]["steps"] == 3
    assert cond["evaluation"]["guidance"] == 1.5 and cond["evaluation"]["null_class"] == 10
    assert list(UNet2DModel.from_config(cond["unet"]).config.block_out_channels) == [8, 16, 32]


def test_same_seed_same_images_bitwise(flow_cfg_run, tmp_path):
    from recipe_zoo import load

    model = load(flow_cfg_run, device="cpu")
    a = model.predict(tmp_path / "a.csv", n=12, seed=7)
    b = model.predict(tmp_path / "b.csv", n=12, seed=7)
    assert a.arrays["images"].shape == (12, 1, 8, 8) and a.arrays["images"].dtype == np.uint8
    assert np.array_equal(a.arrays["images"], b.arrays["images"])  # one process, one model: the same seed replays
    # the same noise through the same ops in the same order
    for name in ("00000.png", "00011.png", "grid.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert not np.array_equal(a.arrays["images"], model.predict(n=12, seed=8).arrays["images"])
    run_seed = model.predict(n=12)  # seed -1: the run's seed (0)
    assert np.array_equal(run_seed.arrays["images"], model.predict(n=12, seed=0).arrays["images"])
    from PIL import Image

    assert np.array_equal(np.asarray(Image.open(tmp_path / "a" / "00003.png")), a.arrays["images"][3, 0])
    # no label: the classes in turn (the grid's columns); a row per image, file and class
    assert [r["label"] for r in _rows(tmp_path / "a.csv")] == [str(i % 10) for i in range(12)]
    assert [r["file"] for r in _rows(tmp_path / "a.csv")][:2] == ["00000.png", "00001.png"]
    assert len(a.files) == 13 and a.files[-1].name == "grid.png"


def test_label_steps_and_guidance_change_what_is_sampled(flow_cfg_run, tmp_path, capfd):
    from recipe_zoo import load
    from recipe_zoo.cli import main

    model = load(flow_cfg_run, device="cpu")
    threes = model.predict(n=4, label="3", seed=1)
    assert threes.rows == [{"file": f"0000{i}.png", "label": "3"} for i in range(4)]
    assert np.array_equal(threes.arrays["labels"], [3, 3, 3, 3])
    base = model.predict(n=4, label="3", seed=1).arrays["images"]
    assert not np.array_equal(base, model.predict(n=4, label="3", seed=1, steps=5).arrays["images"])
    assert not np.array_equal(base, model.predict(n=4, label="3", seed=1, guidance=4.0).arrays["images"])
    out = tmp_path / "gen.csv"
    assert main(["predict", str(flow_cfg_run), "n=5", "label=7", "--out", str(out), "--device", "cpu"]) == 0
    assert "5 predictions" in capfd.readouterr().out
    assert [r["label"] for r in _rows(out)] == ["7"] * 5
    assert sorted(p.name for p in (tmp_path / "gen").iterdir()) == [".zoo-written"] + [f"0000{i}.png" for i in
                                                                                        range(5)] + ["grid.png"]


def test_unconditional_predict(ddpm_run, tmp_path):
    from recipe_zoo import load

    result = load(ddpm_run, device="cpu").predict(tmp_path / "u.csv", n=9, seed=3, batch_size=4)
    assert result.rows[0] == {"file": "00000.png"} and len(result.rows) == 9 and "labels" not in result.arrays
    assert (tmp_path / "u" / "grid.png").is_file()


def test_predict_bad_options_are_one_line(ddpm_run, flow_cfg_run, tmp_path, capfd):
    predict_bad(capfd, flow_cfg_run, "label=cat", needles=("label=cat", "not a class", "0-9"))
    predict_bad(capfd, flow_cfg_run, "label=10", needles=("label=10", "not a class"))
    predict_bad(capfd, ddpm_run, "label=3", needles=("label=3", "diffusion/ddpm is unconditional"))
    predict_bad(capfd, ddpm_run, "guidance=2", needles=("guidance=2", "unconditional"))
    predict_bad(capfd, ddpm_run, f"data={tmp_path}", needles=("data=", "reads no data"))
    predict_bad(capfd, ddpm_run, "n=0", needles=("n",))
    predict_bad(capfd, ddpm_run, "nn=4", needles=("unknown key 'nn'", "did you mean 'n'"))
    predict_bad(capfd, ddpm_run, "seed=-2", needles=("seed",))


def test_export_pretrained_ddpm_is_a_ddim_pipeline_that_generates_the_same_images(ddpm_run, tmp_path):
    from diffusers import DDIMPipeline

    from recipe_zoo import load
    from recipe_zoo.predict import export

    model = load(ddpm_run, device="cpu")
    written = export(model, "pretrained", tmp_path / "pipe")
    assert {p.relative_to(tmp_path / "pipe").as_posix() for p in written} == {
        "model_index.json", "scheduler/scheduler_config.json", "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors", "model.json"}
    pipe = DDIMPipeline.from_pretrained(tmp_path / "pipe")
    pipe.set_progress_bar_config(disable=True)
    theirs = pipe(batch_size=6, generator=torch.Generator().manual_seed(5), num_inference_steps=2, eta=0.0,
                  output_type="np").images  # (6, 8, 8, 1) in [0, 1]
    ours = model.predict(n=6, seed=5).arrays["images"]
    assert np.abs(np.round(theirs.transpose(0, 3, 1, 2) * 255) - ours).max() <= 1


def test_export_pretrained_flow_unet_loads_in_diffusers(flow_cfg_run, tmp_path, capfd):
    from diffusers import UNet2DModel

    from recipe_zoo import load
    from recipe_zoo.cli import main
    from recipe_zoo.recipes.diffusion.models import load_unet

    assert main(["export", str(flow_cfg_run), "--format", "pretrained", "--out", str(tmp_path / "x")]) == 0
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == [".zoo-written", "model.json", "unet"]
    unet = UNet2DModel.from_pretrained(tmp_path / "x", subfolder="unet").eval()
    card = load(flow_cfg_run, device="cpu").card
    ours = load_unet(card, flow_cfg_run / "model.safetensors", "cpu")
    x, t, labels = torch.randn(3, 1, 8, 8), torch.tensor([10.0, 500.0, 990.0]), torch.tensor([0, 4, 10])
    with torch.no_grad():  # the same network and weights, read from two files into buffers aligned as the readers
        # chose: BLAS promises no bitwise result across alignments, so float32's own tolerance (assert_close's)
        torch.testing.assert_close(unet(x, t, class_labels=labels).sample, ours(x, t, class_labels=labels).sample)
    capfd.readouterr()
    assert main(["export", str(flow_cfg_run), "--format", "onnx"]) == 2
    assert "exports safetensors, pretrained" in capfd.readouterr().err
