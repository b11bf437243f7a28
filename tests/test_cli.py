"""The zoo command end to end, as a user calls it (real subprocesses, tiny budgets)."""
import json
import multiprocessing
import sqlite3
import zlib
from pathlib import Path

import pytest

from conftest import run_ok, summary_block, zoo, zoo_in_process
from recipe_zoo import registry, results

TINY = ["width=8", "eval_every=0.5"]


def index_rows(out):
    return results.all_rows(out / "index.sqlite")


HEAVY = ("torch", "numpy", "scipy", "sklearn", "pandas", "xgboost", "monai", "rdkit", "esm", "transformers", "timm")


def test_list_imports_neither_torch_nor_a_recipe_and_matches_registry():
    """What keeps `zoo list` fast on any machine (DESIGN.md: well under a few seconds): the real command imports
    no recipe and none of the heavy packages, read from the interpreter's own log of every import it made."""
    proc = zoo("list", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0 and "vision/resnet" in proc.stdout
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert {"recipe_zoo.cli", "recipe_zoo.registry"} <= imported  # the log is there to read
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY or m.startswith("recipe_zoo.recipes."))
    assert not heavy, heavy
    static = {r["name"]: r for r in registry.static_list()}
    loaded = registry.load_all()
    assert set(static) == set(loaded)
    for name, spec in loaded.items():
        for key in ("benchmark", "metric", "budget", "summary", "scale_out"):
            assert static[name].get(key, getattr(spec, key)) == getattr(spec, key), (name, key)


def test_a_reader_that_leaves_early_stops_the_command_quietly():
    """`zoo list | head -3`: the pipe closes before zoo writes; no traceback, the shell's SIGPIPE status."""
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "recipe_zoo", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    proc.stdout.close()  # before the interpreter has started: every write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_show_prints_fields_with_comments():
    proc = zoo("show", "vision/finetune")
    assert proc.returncode == 0
    assert "head_fraction" in proc.stdout and "fraction of the budget training only the new head" in proc.stdout
    assert "* model" in proc.stdout  # set by the variant


def test_vision_smoke_run_writes_everything(tmp_path):
    out = tmp_path / "runs"
    proc = zoo("run", "vision/resnet", *TINY, "--budget", "12steps", "--out", out, "--seed", "3",
               env={"ZOO_PLOTS": "1"})  # the tests' runs skip curves.png (conftest): this one draws it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    block = summary_block(proc.stdout)
    assert block["recipe"] == "vision/resnet" and block["benchmark"] == "digits" and block["status"] == "ok"
    assert block["metric"] == "test_accuracy" and 0.0 <= float(block["value"]) <= 1.0 and block["seed"] == "3"
    run_dir = next((out / "vision" / "resnet").iterdir())
    for name in ("config.json", "env.json", "metrics.csv", "train.csv", "log.txt", "checkpoint.pt",
                 "summary.json", "curves.png", "model.safetensors", "split.csv"):
        assert (run_dir / name).is_file(), name
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["config"]["width"] == 8 and saved["budget"] == "12steps"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["steps"] == 12 and "test_macro_f1" in summary["metrics"]
    env = json.loads((run_dir / "env.json").read_text())
    assert env["torch"] and "threads" in env["hardware"] and "torch" in env["packages"]
    (row,) = index_rows(out)
    assert row["status"] == "ok" and row["metric"] == pytest.approx(float(block["value"]), abs=1e-4)
    tsv = zoo("runs", "--tsv", "--out", out).stdout.splitlines()
    assert tsv[0].split("\t")[:5] == ["commit", "metric", "memory_gb", "status", "description"]
    assert tsv[1].split("\t")[3] == "ok"


def _write_png(path, color=(200, 10, 10), size=12):
    """A noisy image around ``color``: real photos are never flat, and flat ones make whitening degenerate."""
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(str(path).encode()))
    pixels = np.clip(rng.normal(color, 30, (size, size, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)


def test_own_folder_run(tmp_path):
    data = tmp_path / "photos"
    for i in range(6):
        _write_png(data / "train" / "red" / f"{i}.png", (220, 20, 20))
        _write_png(data / "train" / "blue" / f"{i}.png", (20, 20, 220))
    for i in range(2):
        _write_png(data / "val" / "red" / f"{i}.png", (220, 20, 20))
        _write_png(data / "val" / "blue" / f"{i}.png", (20, 20, 220))
    (data / "train" / "red" / "notes.txt").write_text("not an image")
    out = tmp_path / "runs"
    proc = zoo("run", "vision/resnet", f"data={data}", "image_size=16", "batch_size=4", *TINY,
               "--budget", "6steps", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "/ 4 test images, 2 classes" in proc.stdout and "4 test (val/)" in summary_block(proc.stdout)["split"]
    assert "skipped 1 non-image files" in proc.stdout
    assert summary_block(proc.stdout)["benchmark"].startswith("own:")


@pytest.mark.parametrize("case", ["empty_folder", "corrupt_image", "typo_key", "bad_type", "unknown_recipe",
                                  "zero_budget", "negative_budget", "missing_dataset", "missing_folder"])
def test_bad_input_one_line_exit_2(tmp_path, case):
    out = tmp_path / "runs"
    args, expect = {
        "empty_folder": (["data={empty}"], "no class subfolders"),
        "corrupt_image": (["data={corrupt}"], "bad.png: cannot decode image"),
        "typo_key": (["widht=8"], "unknown key 'widht'; did you mean 'width'?"),
        "bad_type": (["width=wide"], "width='wide' is not a valid int"),
        "unknown_recipe": (None, "unknown recipe 'vision/resnett'; did you mean 'vision/resnet'?"),
        "zero_budget": (["--budget", "0s"], "must be positive"),
        "negative_budget": (["--budget", "-5"], "expected a number and a unit"),
        "missing_dataset": (["data=cifar10-subset"], "dataset 'cifar10-subset' not found at"),
        "missing_folder": (["data={missing}/x"], "not a vision dataset"),
    }[case]
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = tmp_path / "corrupt"
    _write_png(corrupt / "cat" / "ok.png")
    _write_png(corrupt / "dog" / "ok.png")
    (corrupt / "dog" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nthis is not really a png")
    fill = {"empty": empty, "corrupt": corrupt, "missing": tmp_path / "nowhere"}
    target = "vision/resnett" if args is None else "vision/resnet"
    args = [a.format(**fill) for a in (args or [])]
    if "--budget" not in args:
        args += ["--budget", "3steps"]
    proc = zoo_in_process("run", target, *args, "--out", out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err_lines = proc.stderr.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("zoo: error: "), proc.stderr
    assert expect in err_lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert all(r["status"] != "ok" for r in index_rows(out))


def test_zoo_plots_0_skips_the_curves_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_PLOTS", "0")
    summary, _ = run_ok("vision/resnet", *TINY, "--out", tmp_path / "runs", budget="4steps")
    run_dir = Path(summary["run_dir"])
    assert not (run_dir / "curves.png").exists() and (run_dir / "model.safetensors").is_file()
    assert summary["status"] == "ok"


def test_diverged_run_exits_3(tmp_path):
    out = tmp_path / "runs"
    proc = zoo("run", "vision/resnet", "lr=1e6", "warmup=0", *TINY, "--budget", "30steps", "--out", out)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "diverged" in proc.stdout and "lower the LR" in proc.stdout
    assert summary_block(proc.stdout)["status"] == "diverged"
    assert [r["status"] for r in index_rows(out)] == ["diverged"]


def test_resume_without_checkpoint_is_an_input_error(tmp_path):
    proc = zoo_in_process("run", "--resume", tmp_path)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr


USER_RECIPE = '''
from dataclasses import dataclass
import torch
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.schedule import apply_schedules, make_schedule
from recipe_zoo.core.api import recipe


@dataclass
class Config:
    hidden: int = 8  # units
    lr: float = 0.1  # peak LR


@recipe("mine/tiny", config=Config, benchmark="synthetic", metric="loss", higher_is_better=False, budget="5steps")
def train(cfg, run):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x.sum(1, keepdim=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, cfg.hidden), torch.nn.ReLU(), torch.nn.Linear(cfg.hidden, 1))
    loss_fn = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    res = fit(model, opt, TensorBatches((x, y), 16, seed=run.seed), loss_fn, run, device=torch.device("cpu"),
              evaluate=lambda m: {"loss": loss_fn(m, (x, y)).item()},
              update_hparams=lambda o, p, s: apply_schedules(o, p, s, lr=make_schedule("constant")))
    return {**res.stats(), **res.metrics}
'''


def test_run_user_recipe_file(tmp_path):
    path = tmp_path / "elsewhere" / "mytask.py"
    path.parent.mkdir()
    path.write_text(USER_RECIPE)
    out = tmp_path / "runs"
    proc = zoo("run", path, "hidden=4", "--out", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    block = summary_block(proc.stdout)
    assert block["recipe"] == "mine/tiny" and block["status"] == "ok" and float(block["value"]) > 0
    bad = zoo("run", path, "hiden=4", "--out", out, cwd=tmp_path)
    assert bad.returncode == 2 and "did you mean 'hidden'" in bad.stderr


def _write_rows(args):
    path, worker = args
    for i in range(25):
        results.upsert(path, {"run_id": f"w{worker}-{i}", "status": "ok", "metric": float(i), "recipe": "x"})


def test_concurrent_index_writers_lose_nothing(tmp_path):
    path = tmp_path / "index.sqlite"
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        pool.map(_write_rows, [(path, w) for w in range(8)])
    rows = results.all_rows(path)
    assert len(rows) == 200 and len({r["run_id"] for r in rows}) == 200
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
