"""Own image folders as the image recipes read them: the size rule (the median short side of the training images,
rounded to 32, within [32, 224]), the aspect ratio kept by a centre crop, greyscale folders kept one channel and
mixed ones read as RGB, end to end in vision/resnet, contrastive/simclr and diffusion/ddpm."""
import json
import re

import numpy as np
import pytest
import torch
from PIL import Image

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes import image_decoding, images


def _save(path, size, mode="L", value=128):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path)
    return path


def _grey_folder(root, classes=("a", "b"), n=8, size=(20, 20)):
    """Class folders of greyscale images, each class its own brightness plus noise (learnable, not constant)."""
    rng = np.random.default_rng(0)
    for c, cls in enumerate(classes):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            pixels = np.clip(rng.normal(60 + 120 * c, 30, size[::-1]), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / cls / f"{i}.png")
    return root


@pytest.mark.parametrize("sizes,expected", [
    ([(100, 150), (150, 90), (110, 200)], 96),  # short sides 100, 90, 110: median 100 -> 96
    ([(100, 150), (140, 140)], 128),  # an even count: the mean of the middle two, 120 -> 128
    ([(48, 60)], 64), ([(80, 80)], 96),  # halfway: rounded up
    ([(8, 8), (10, 12), (300, 300)], 32),  # thumbnails: at least 32
    ([(3000, 2000), (4000, 3000), (20, 20)], 224),  # photos: at most 224
])
def test_the_size_rule(tmp_path, sizes, expected):
    paths = [_save(tmp_path / f"{i}.png", size) for i, size in enumerate(sizes)]
    logs = []
    assert image_decoding.own_image_size(paths, logs.append) == expected
    assert logs == [f"image size {expected} px: the median short side {np.median([min(s) for s in sizes]):g} px "
                    "rounded to 32, within [32, 224] (set image_size=N to choose)"]


def _stripes(size, colours):
    """An image of equal stripes of ``colours`` across its longer side."""
    w, h = size
    pixels = np.zeros((h, w, 3), dtype=np.uint8)
    for i, colour in enumerate(colours):
        if w >= h:
            pixels[:, i * w // len(colours):(i + 1) * w // len(colours)] = colour
        else:
            pixels[i * h // len(colours):(i + 1) * h // len(colours)] = colour
    return Image.fromarray(pixels)


@pytest.mark.parametrize("size", [(128, 64), (64, 128)])
def test_the_aspect_ratio_is_kept_by_a_centre_crop(tmp_path, size):
    red, green, yellow, blue = (255, 0, 0), (0, 255, 0), (255, 255, 0), (0, 0, 255)
    _stripes(size, [red, green, yellow, blue]).save(tmp_path / "wide.png")
    x = image_decoding.decode_image(tmp_path / "wide.png", 32)  # (32, 32, 3): the centre square, green then yellow
    first, second = (x[:, 2:14], x[:, 18:30]) if size[0] > size[1] else (x[2:14], x[18:30])
    assert x.shape == (32, 32, 3)
    assert (first == torch.tensor(green, dtype=torch.uint8)).all()
    assert (second == torch.tensor(yellow, dtype=torch.uint8)).all()
    inner = x[:, 1:-1] if size[0] > size[1] else x[1:-1]  # the outer pixels blend in a little of the next stripe
    assert not (inner[..., 2] > 0).any() and not (inner[..., 1] < 255).any()  # no blue or red: cropped, not squashed


def test_an_image_of_the_size_is_not_resampled(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "0.png")
    assert torch.equal(image_decoding.decode_image(tmp_path / "0.png", 16), torch.from_numpy(pixels))


def test_greyscale_modes_stay_one_channel_and_colour_modes_become_rgb(tmp_path):
    grey = [_save(tmp_path / "l.png", (6, 4), "L", 77), _save(tmp_path / "one.png", (6, 4), "1", 1),
            _save(tmp_path / "la.png", (6, 4), "LA", (77, 10)), _save(tmp_path / "i16.png", (6, 4), "I;16", 77)]
    for path in grey:
        assert image_decoding.decode_image(path, None).shape == (4, 6, 1), path.name
    assert image_decoding.decode_image(grey[0], None).unique().tolist() == [77]
    colour = [_save(tmp_path / "rgba.png", (6, 4), "RGBA", (1, 2, 3, 4)), _save(tmp_path / "p.png", (6, 4), "P", 3),
              _save(tmp_path / "cmyk.jpg", (6, 4), "CMYK", (0, 0, 0, 0))]
    for path in colour:
        assert image_decoding.decode_image(path, None).shape == (4, 6, 3), path.name
    assert image_decoding.decode_images(grey, 8, tmp_path).shape == (4, 1, 8, 8)


def test_a_greyscale_folder_is_one_channel_and_a_mixed_one_rgb(tmp_path):
    root = _grey_folder(tmp_path / "digits", n=10)
    logs = []
    grey = images.load_folder_splits(root, 0, 0.1, 0.2, log=logs.append)
    assert grey.train_x.shape[1:] == (1, 32, 32) and grey.val_x.shape[1] == grey.test_x.shape[1] == 1
    assert logs[0].startswith("image size 32 px") and not [m for m in logs if "converted to RGB" in m]
    Image.new("RGB", (20, 20), (200, 10, 10)).save(root / "a" / "colour.png")
    mixed = images.load_folder_splits(root, 0, 0.1, 0.2, log=logs.append)
    assert mixed.train_x.shape[1] == mixed.val_x.shape[1] == mixed.test_x.shape[1] == 3
    assert f"{root}: 20 greyscale of 21 images converted to RGB (the others are colour)" in logs
    i = mixed.keys["train"].index("a/0.png")  # a grey image: three equal channels, its grey values
    assert torch.equal(mixed.train_x[i], grey.train_x[grey.keys["train"].index("a/0.png")].expand(3, -1, -1))


def test_held_out_folders_take_the_size_of_train(tmp_path):
    for i in range(3):
        for cls in ("a", "b"):
            _save(tmp_path / "photos" / "train" / cls / f"{i}.png", (150, 101))  # train alone: 96, with test: 192
            _save(tmp_path / "photos" / "test" / cls / f"{i}.png", (400, 300))
    logs = []
    splits = images.load_folder_splits(tmp_path / "photos", 0, 0.3, 0.2, log=logs.append)
    assert splits.train_x.shape[2:] == splits.val_x.shape[2:] == splits.test_x.shape[2:] == (96, 96)
    assert logs[0].startswith("image size 96 px: the median short side 101 px")


def test_bad_folders_keep_their_one_line_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ZooError, match="no class subfolders"):
        images.load_folder_splits(tmp_path / "empty", 0, 0.1, 0.2, log=lambda s: None)
    root = _grey_folder(tmp_path / "pics")
    (root / "b" / "broken.png").write_bytes(b"not a png")  # its header is unreadable: the size rule names it
    with pytest.raises(ZooError, match=re.escape(f"{root / 'b' / 'broken.png'}: cannot decode image")):
        images.load_folder_splits(root, 0, 0.1, 0.2, log=lambda s: None)


def test_contrastive_evaluates_at_the_pretraining_images_size_and_channels(tmp_path):
    from types import SimpleNamespace

    from recipe_zoo.recipes.contrastive import data, simclr

    for i in range(10):
        _save(tmp_path / "unlabelled" / f"{i}.png", (130, 100))  # grey, median short side 100: 96
    for cls in ("red", "blue"):
        for i in range(6):
            _save(tmp_path / "labelled" / cls / f"{i}.png", (40, 40), "RGB", (200 * (cls == "red"), 0, 9 * i))
    logs, reported = [], {}
    cfg = simclr.ContrastiveConfig(data=str(tmp_path / "unlabelled"), eval_data=str(tmp_path / "labelled"))
    own = data.load_data(cfg, SimpleNamespace(log=logs.append, report=reported.__setitem__))
    assert own.pretrain_x.shape[1:] == own.eval.train_x.shape[1:] == own.eval.test_x.shape[1:] == (3, 96, 96)
    assert reported == {"image_size": 96} and f"{cfg.data}: greyscale images converted to RGB" in "\n".join(logs)


# ---------------------------------------------------------------------------------------------
# End to end: a greyscale folder trains as one channel; the size lands in the summary
# ---------------------------------------------------------------------------------------------

def _run(args: list, out):
    """``zoo run ARGS`` in this process (the imports are paid already): the run folder."""
    from recipe_zoo.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a second thread mostly waits
    try:
        assert main(["run", *map(str, args), "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    (run_dir,) = (out / args[0]).iterdir()
    return run_dir


def _in_channels(run_dir, stem: str) -> int:
    """The input channels of the exported model's first convolution (its weight: out, in, k, k)."""
    from safetensors.torch import load_file

    return load_file(str(run_dir / "model.safetensors"))[stem].shape[1]


def test_vision_trains_a_greyscale_folder_as_one_channel(tmp_path):
    root = _grey_folder(tmp_path / "digits")
    run_dir = _run(["vision/resnet", f"data={root}", "width=8", "batch_size=8", "eval_every=0.5", "tta=0",
                    "--budget", "2steps"], tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["extra"]["image_size"] == 32
    assert _in_channels(run_dir, "whiten.weight") == 1


@pytest.mark.slow
def test_vision_reads_a_mixed_folder_as_rgb_at_its_size(tmp_path):
    root = _grey_folder(tmp_path / "pics", size=(90, 70))
    Image.new("RGB", (90, 70), (200, 10, 10)).save(root / "a" / "colour.png")
    run_dir = _run(["vision/resnet", f"data={root}", "width=8", "batch_size=8", "tta=0", "--budget", "1steps"],
                   tmp_path / "runs")
    assert json.loads((run_dir / "summary.json").read_text())["extra"]["image_size"] == 64
    assert _in_channels(run_dir, "whiten.weight") == 3
    assert "16 greyscale of 17 images converted to RGB" in (run_dir / "log.txt").read_text()


@pytest.mark.slow
def test_contrastive_pretrains_on_a_greyscale_folder(tmp_path):
    root = _grey_folder(tmp_path / "digits")
    run_dir = _run(["contrastive/simclr", f"data={root}", "width=8", "proj_hidden=32", "batch_size=8",
                    "eval_every=0", "--budget", "2steps"], tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["extra"]["image_size"] == 32 and "brightness/contrast" in summary["extra"]["augment"]
    assert _in_channels(run_dir, "whiten.weight") == 1  # zoo-net's stem, simclr's default backbone


@pytest.mark.slow
def test_diffusion_samples_a_greyscale_folder_in_one_channel(tmp_path):
    root = _grey_folder(tmp_path / "digits", n=12)
    run_dir = _run(["diffusion/ddpm", f"data={root}", "width=8", "levels=2", "n_samples=8", "n_real=8",
                    "sample_steps=2", "grid=4", "--budget", "2steps"], tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["extra"]["image_size"] == 32 and _in_channels(run_dir, "conv_in.weight") == 1
    with Image.open(run_dir / "samples.png") as im:  # grey: one channel repeated by the image writer
        r, g, b = np.asarray(im.convert("RGB")).transpose(2, 0, 1)
    assert (r == g).all() and (g == b).all()
