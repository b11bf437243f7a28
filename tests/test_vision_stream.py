"""vision/resnet on images read as they are used: a folder streamed (decoded in worker processes) or prepared once
(zoo data prepare) trains exactly as the folder in memory does, resumes exactly, and holds the batches, not the data."""
import json
import signal

import numpy as np
import pytest
from safetensors.torch import load_file

from conftest import roundtrip, summary_block, train_in_process, zoo, zoo_in_process
from test_reliability import assert_same_run, start, the_run_dir, wait_for_step

SMALL = ["model=zoo-net", "width=8", "batch_size=16", "tta=0", "eval_every=0.5", "--seed", "1"]


def image_folder(root, classes=("cat", "dog", "owl"), n=24, size=12, grey_one=True):
    """Class folders of small PNGs; one greyscale file among colour ones (converted to RGB on both paths)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, cls in enumerate(classes):
        (root / cls).mkdir(parents=True)
        for i in range(n):
            pixels = np.clip(rng.normal(60 + 60 * c, 40, (size, size, 3)), 0, 255).astype(np.uint8)
            im = Image.fromarray(pixels)
            (im.convert("L") if grey_one and c == 0 and i == 0 else im).save(root / cls / f"{i}.png")
    return root


def weights(out):
    (run_dir,) = (out / "vision" / "resnet").iterdir()
    return load_file(run_dir / "model.safetensors"), run_dir


def same_weights(a, b):
    """Bit for bit: runs in processes of the same kind on this machine (the same threads) train with the same ops in
    the same order on the same pixels; torch's allocator aligns every buffer alike (64 bytes)."""
    return a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


@pytest.mark.slow
def test_streamed_and_prepared_folders_train_exactly_as_in_memory(tmp_path):
    folder = image_folder(tmp_path / "imgs")
    args = ["run", "vision/resnet", f"data={folder}", *SMALL, "--budget", "8steps"]
    mem = zoo_in_process(*args, "--out", tmp_path / "mem")
    assert mem.returncode == 0, mem.stderr[-2000:]
    streamed = zoo_in_process(*args, "stream=true", "workers=2", "--out", tmp_path / "stream")
    assert streamed.returncode == 0, streamed.stderr[-2000:]
    a, mem_dir = weights(tmp_path / "mem")
    b, stream_dir = weights(tmp_path / "stream")
    assert same_weights(a, b)
    roundtrip(stream_dir)  # zoo predict reads the streamed run's test split again: its metric back

    prep = zoo_in_process("data", "prepare", "vision/resnet", f"data={folder}", "--out", tmp_path / "prepared")
    assert prep.returncode == 0, prep.stderr[-2000:]
    manifest = json.loads((tmp_path / "prepared" / "prepared.json").read_text())
    assert manifest["kind"] == "images" and manifest["sizes"]["train"] + manifest["sizes"]["validation"] + \
        manifest["sizes"]["test"] == 72 and manifest["image_shape"] == [3, 32, 32]  # the own-size rule: at least 32 px
    assert np.load(tmp_path / "prepared" / "train_x.npy", mmap_mode="r").shape[1:] == (3, 32, 32)  # plain .npy
    again = zoo_in_process("data", "prepare", "vision/resnet", f"data={folder}", "--out", tmp_path / "prepared")
    assert "up to date" in again.stderr + again.stdout
    from_prepared = zoo_in_process("run", "vision/resnet", f"data={tmp_path / 'prepared'}", *SMALL, "--budget",
                                   "8steps", "--out", tmp_path / "prep-run")
    assert from_prepared.returncode == 0, from_prepared.stderr[-2000:]
    c, prep_dir = weights(tmp_path / "prep-run")
    assert same_weights(a, c)
    # the same benchmark as the folder itself, and the same split, item by item
    assert summary_block(from_prepared.stdout)["benchmark"] == summary_block(mem.stdout)["benchmark"]
    assert (prep_dir / "split.csv").read_text() == (mem_dir / "split.csv").read_text()
    roundtrip(prep_dir)


@pytest.mark.slow
def test_a_run_asking_for_other_prepared_settings_is_one_line(tmp_path):
    folder = image_folder(tmp_path / "imgs", n=8)
    assert zoo_in_process("data", "prepare", "vision/resnet", f"data={folder}", "image_size=16", "--out",
                          tmp_path / "p").returncode == 0
    bad = zoo_in_process("run", "vision/resnet", f"data={tmp_path / 'p'}", "image_size=32", "--budget", "2steps",
                         "--out", tmp_path / "runs")
    assert bad.returncode == 2
    assert "prepared with image_size=16, and this run asks image_size=32" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    llm = zoo_in_process("run", "llm/gpt", f"data={tmp_path / 'p'}", "--budget", "2steps", "--out", tmp_path / "runs")
    assert llm.returncode == 2 and "prepared as 'images' data" in llm.stderr
    none = zoo_in_process("data", "prepare", "tabular/mlp", f"data={folder}")
    assert none.returncode == 2 and "prepares no data" in none.stderr
    missing = zoo_in_process("data", "prepare", "vision/resnet", f"data={tmp_path / 'nope'}")
    assert missing.returncode == 2 and "nope: no such file or folder" in missing.stderr


def test_a_corrupt_image_met_while_streaming_is_one_line(tmp_path):
    folder = image_folder(tmp_path / "imgs", n=8, grey_one=False)
    (folder / "dog" / "3.png").write_bytes(b"not a png")
    bad = zoo_in_process("run", "vision/resnet", f"data={folder}", "stream=true", *SMALL, "--budget", "2steps",
              "--out", tmp_path / "runs")
    assert bad.returncode == 2 and "dog/3.png: cannot decode image" in bad.stderr


@pytest.mark.slow
def test_a_killed_streaming_run_resumes_exactly(tmp_path):
    folder = image_folder(tmp_path / "imgs", n=30)
    args = ["vision/resnet", f"data={folder}", "stream=true", "workers=2", *SMALL, "log_every=0",
            "checkpoint_every=0", "--budget", "30steps"]
    ref = zoo_in_process("run", *args, "--out", tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-2000:]
    out = tmp_path / "runs"
    proc = start(args, out)
    wait_for_step(proc, 12, checkpoint_of=out)
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    resumed = zoo_in_process("run", "--resume", the_run_dir(out, "vision/resnet"), "--out", out)
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stderr[-2000:]
    assert_same_run(the_run_dir(tmp_path / "ref", "vision/resnet"), the_run_dir(out, "vision/resnet"))


def jpeg_folder(root, n_per_class: int, size: int, classes=("a", "b")):
    from PIL import Image

    rng = np.random.default_rng(0)
    base = np.linspace(0, 255, size, dtype=np.float32)
    for c, cls in enumerate(classes):
        (root / cls).mkdir(parents=True)
        for i in range(n_per_class):
            pixels = (base[None, :, None] * (0.5 + c) + rng.normal(0, 20, (size, size, 3))) % 256
            Image.fromarray(pixels.astype(np.uint8)).save(root / cls / f"{i}.jpg", quality=80)
    return root


@pytest.mark.slow
def test_streaming_holds_the_batches_not_the_dataset(tmp_path, monkeypatch):
    """What each run adds to this process's memory (``run_rss_growth_mb``: sampled while it runs, less the memory
    when it began), in the test process, whose own peak (torch, the tests before) is far above the 94 MB of 2,000
    training images of 128 px: its ``peak_rss_mb`` cannot tell the runs apart, the growth does. A streamed run on
    2,000 grows within 47 MB (half the images) of one on 200 (the same batches, model, validation and test
    images; zoo-resnet, which fits no whitening stem on a sample of them); a streamed run that keeps every image it
    decodes (planted) grows past it. Validation and test hold 4 images each: scored in one batch, the activations of
    40 such images (~100 MB at their peak) land in memory the allocator already holds or in new pages as the heap
    happens to lie, which moved the growth of runs alike by ~50 MB; each size runs twice and keeps the lesser
    growth. About 30 s."""
    from recipe_zoo.recipes import image_streams

    images_mb = 2_000 * 3 * 128 * 128 / 2**20
    cap_mb = images_mb / 2
    small, big = tmp_path / "small", tmp_path / "big"
    for root, n in ((small, 100), (big, 1_000)):  # two classes; the same 8 validation and test images in both
        jpeg_folder(root / "train", n, 128), jpeg_folder(root / "val", 2, 128), jpeg_folder(root / "test", 2, 128)
    args = ["image_size=128", "model=zoo-resnet", "width=8", "lr=0.01", "batch_size=4", "tta=0", "eval_every=0",
            "workers=0", "stream=true"]

    def growth_mb(name: str, data) -> float:
        run_dir = train_in_process(tmp_path / name, "vision/resnet", f"data={data}", *args, budget="3steps",
                                   cache=tmp_path / "cache")  # the CPU's peak measured once, by the warm-up run
        return json.loads((run_dir / "summary.json").read_text())["run_rss_growth_mb"]

    growth_mb("warm-up", small)  # the first run in a process also imports and initialises what every run uses
    # where a run's transient tensors land (memory the allocator holds, or new pages) only adds: the least of two
    growth = {name: min(growth_mb(f"{name}{i}", data) for i in (1, 2))
              for name, data in (("small", small), ("big", big))}
    held = []
    streamed = image_streams.folder_images

    def holding_every_image(paths, size, root, log=print):  # the regression: decoded as streamed, and all kept
        lazy = streamed(paths, size, root, log)
        held.append(lazy[np.arange(len(lazy))])
        return lazy

    monkeypatch.setattr(image_streams, "folder_images", holding_every_image)
    growth["planted"] = growth_mb("planted", big)
    assert held and held[0].nbytes == 2_008 * 3 * 128 * 128
    held.clear()
    print("run RSS growth (MB):", {k: round(v, 1) for k, v in growth.items()}, f"cap {cap_mb:.1f}")
    assert growth["big"] - growth["small"] < cap_mb, growth
    assert growth["planted"] - growth["small"] > cap_mb, growth


@pytest.mark.slow
def test_two_processes_streaming_a_prepared_folder_train_like_one_accumulating(tmp_path):
    """Each rank reads only its own micro-batches of the prepared arrays; together they are one process's batch
    with two accumulation steps (batch norm per micro-batch, as in tests/test_distributed.py)."""
    from test_distributed import losses, train_rows

    folder = image_folder(tmp_path / "imgs", n=30)
    assert zoo_in_process("data", "prepare", "vision/resnet", f"data={folder}", "--out", tmp_path / "p").returncode == 0
    # fp32: the check compares two orders of summing the gradients; bf16's rounding of the weights in the forward
    # would magnify their last-bit difference past the tolerance (precision=auto computes vision/resnet in bf16)
    common = ["run", "vision/resnet", *SMALL, "precision=fp32", "--budget", "8steps"]
    one = zoo_in_process(*common, f"data={folder}", "accum_steps=2", "--out", tmp_path / "one")
    two = zoo(*common, f"data={tmp_path / 'p'}", "lr_scaling=sqrt", "--nproc", "2", "--out", tmp_path / "two")
    assert one.returncode == 0 and two.returncode == 0, one.stderr[-2000:] + two.stderr[-2000:]
    assert summary_block(two.stdout)["global_batch"] == "32"
    _, rows_one = train_rows(tmp_path / "one", "vision/resnet")
    _, rows_two = train_rows(tmp_path / "two", "vision/resnet")
    assert losses(rows_two) == pytest.approx(losses(rows_one), rel=1e-5)
