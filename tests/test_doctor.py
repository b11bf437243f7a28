"""zoo doctor, sweep and plan: planted bugs are found, a healthy config stays quiet, the numbers hold."""
import json
import math

import numpy as np
import pytest

from recipe_zoo import plan_advice, plan_cost, registry, sweep
from recipe_zoo.core import api
from recipe_zoo.cli import main

# A small real recipe with switches that plant the checklist's classic bugs.
RECIPE = '''
import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import schedule
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.api import recipe


@dataclass
class BlobsConfig(LoopSettings):
    lr: float = 3e-3  # AdamW LR
    batch_size: int = 64
    weight_decay: float = 0.0
    warmup: float = 0.05
    shuffle_labels: bool = False  # planted bug: labels shuffled apart from their inputs
    leak: bool = False  # planted bug: validation rows copied from training rows
    apply_schedule: bool = True  # False = planted bug: the schedule is computed but never set
    nan_rows: int = 0  # planted bad data: rows of NaN inputs
    eval_every: float = 0.0


def blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(16, 4, generator=torch.Generator().manual_seed(99))
    x = torch.randn(n, 16, generator=g)
    y = (x @ teacher + 0.5 * torch.randn(n, 4, generator=g)).argmax(1)
    return x, y


@recipe("test/blobs", config=BlobsConfig, benchmark="blobs", metric="val_loss", higher_is_better=False,
        budget="150steps", summary="an MLP on noisy linear classes, with planted-bug switches")
def train(cfg, run):
    x, y = blobs(2048, 0)
    vx, vy = blobs(512, 1)
    if cfg.shuffle_labels:
        y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(5))]
    if cfg.leak:
        vx[:100], vy[:100] = x[:100], y[:100]
    if cfg.nan_rows:
        x[:cfg.nan_rows] = float("nan")
    run.inspect(train=(x, y), val=(vx, vy), task="classification", num_classes=4)
    model = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    lr = schedule.make_schedule("cosine", warmup=cfg.warmup)
    if cfg.apply_schedule:
        update = functools.partial(schedule.apply_schedules, lr=lr)
    else:
        def update(optimizer, progress, step):
            return lr(progress)

    def loss_fn(model, batch):
        return F.cross_entropy(model(batch[0]), batch[1])

    def evaluate(model):
        return {"val_loss": F.cross_entropy(model(vx), vy).item()}

    result = fit(model, optimizer, TensorBatches((x, y), cfg.batch_size, seed=run.seed), loss_fn, run,
                 device=torch.device("cpu"), evaluate=evaluate, update_hparams=update, settings=LoopSettings.of(cfg))
    return {**result.stats(), **result.metrics}
'''


@pytest.fixture()
def blobs(tmp_path, monkeypatch):
    monkeypatch.setattr(api, "REGISTRY", dict(api.REGISTRY))
    path = tmp_path / "blobs.py"
    path.write_text(RECIPE)
    return str(path)


def doctor(path, tmp_path, *overrides, steps=60):
    out = tmp_path / "out"
    code = main(["doctor", path, *overrides, "--steps", str(steps), "--out", str(out)])
    report_dir = max((out / "doctor" / "test" / "blobs").iterdir())
    findings = json.loads((report_dir / "findings.json").read_text())
    return code, {f["check"]: f for f in findings}, report_dir


def test_healthy_config_is_quiet(blobs, tmp_path):
    code, found, report_dir = doctor(blobs, tmp_path)
    loud = {k: f["message"] for k, f in found.items() if f["severity"] in ("warn", "error")}
    assert code == 0 and not loud, loud
    for check in ("data/leakage", "data/balance", "overfit/one-batch", "overfit/transfer", "lr/range",
                  "health/schedule", "health/loss", "health/grad-norm", "health/dead-relu"):
        assert check in found, check
    report = (report_dir / "report.md").read_text()
    assert "## LR range test" in report and "## Training health" in report
    for plot in ("overfit.png", "lr_range.png", "health.png"):
        assert (report_dir / plot).stat().st_size > 1000
    assert json.loads((report_dir / "suggested.json").read_text())["config"]["lr"] > 0


def test_shuffled_labels_fail_the_overfit_check(blobs, tmp_path):
    code, found, _ = doctor(blobs, tmp_path, "shuffle_labels=true")
    assert code == 1
    assert found["overfit/transfer"]["severity"] == "error"
    assert "unrelated" in found["overfit/transfer"]["message"]


def test_leaked_duplicates_are_flagged(blobs, tmp_path):
    code, found, _ = doctor(blobs, tmp_path, "leak=true", steps=10)
    assert code == 1
    assert found["data/leakage"]["severity"] == "error"
    assert "100 of 512 validation rows" in found["data/leakage"]["message"]


def test_schedule_that_never_applies_is_flagged(blobs, tmp_path):
    code, found, _ = doctor(blobs, tmp_path, "apply_schedule=false", steps=20)
    assert code == 1
    assert found["health/schedule"]["severity"] == "error"
    assert "not applied" in found["health/schedule"]["message"]


def test_nan_inputs_are_flagged_with_rows(blobs, tmp_path):
    code, found, _ = doctor(blobs, tmp_path, "nan_rows=3", steps=10)
    assert code == 1
    assert found["data/nonfinite"]["severity"] == "error"
    assert "rows 0, 1, 2" in found["data/nonfinite"]["message"]


@pytest.mark.slow
def test_lr_suggestion_within_3x_of_the_sweep_best(blobs, tmp_path, capsys):
    code, found, report_dir = doctor(blobs, tmp_path, "lr=1e-3", steps=100)
    suggested = json.loads((report_dir / "suggested.json").read_text())["config"]["lr"]
    grid = [f"{v:.3g}" for v in (1e-3 * 10 ** (k / 2) for k in range(6))]  # 1e-3 .. 0.3, half decades
    out = tmp_path / "sweep"
    assert main(["sweep", blobs, "lr=" + ",".join(grid), "--seeds", "1", "--out", str(out)]) == 0
    best = json.loads(next((out / "sweeps").rglob("best.json")).read_text())
    best_lr = float(best["config"]["lr"])
    assert 1 / 3 <= suggested / best_lr <= 3, (suggested, best_lr)


@pytest.mark.slow
def test_sweep_verdicts_tsv_and_index(blobs, tmp_path):
    out = tmp_path / "sweep"
    assert main(["sweep", blobs, "batch_size=32,64,128", "lr=1e-2,3e-2", "--seeds", "2", "--budget", "40steps",
                 "--out", str(out)]) == 0
    sweep_dir = next((out / "sweeps").rglob("best.json")).parent
    tsv = (sweep_dir / "results.tsv").read_text().splitlines()
    assert tsv[0] == "commit\tmetric\tmemory_gb\tstatus\tdescription"
    # baseline, 2 LRs, then 2 batch sizes (64 is the baseline's): LR first, the order of impact
    assert len(tsv) == 1 + 1 + 2 + 2
    assert "lr=" in tsv[2] and "batch_size" in tsv[4]
    assert {line.split("\t")[3] for line in tsv[1:]} <= {"keep", "discard", "crash"}
    table = (sweep_dir / "sweep.md").read_text()
    assert "LR x" in table  # the sqrt rule moved the LR with the batch
    from recipe_zoo import results

    rows = results.all_rows(out / "index.sqlite")
    assert len(rows) == 2 * 5 and all(r["status"] == "ok" for r in rows)


def test_sweep_rules():
    from recipe_zoo.recipes.llm.gpt import GPTConfig

    fixed, swept = sweep.split_overrides(["warmup=0.1,0.2", "batch_tokens=2048,8192", "matrix_lr=0.02,0.08",
                                          "depth=2"], GPTConfig)
    assert fixed == {"depth": "2"} and [k for k, _ in swept] == ["matrix_lr", "batch_tokens", "warmup"]
    moved, note = sweep.lr_rule(GPTConfig(), "batch_tokens", "16384", GPTConfig)
    assert math.isclose(float(moved["matrix_lr"]), 0.04 * 2, rel_tol=1e-3)
    assert math.isclose(float(moved["embedding_lr"]), 0.6 * 2, rel_tol=1e-3) and "sqrt" in note
    best, same, better = sweep.Trial({}, [1.0, 1.2]), sweep.Trial({}, [1.1, 1.15]), sweep.Trial({}, [2.0, 2.1])
    assert sweep.verdict(same, best, higher=True) == "within noise"
    assert sweep.verdict(better, best, higher=True) == "keep"
    assert sweep.verdict(better, best, higher=False) == "discard"


@pytest.mark.parametrize("args, needle", [
    (["sweep", "vision/resnet", "lr=0.1"], "needs a key=v1,v2"),
    (["sweep", "vision/resnet", "lrr=0.1,0.2"], "unknown key 'lrr'"),
    (["sweep", "vision/resnet", "lr=0.1,abc"], "lr='abc'"),
    (["doctor", "vision/resnet", "--steps", "3"], "at least 10 steps"),
    (["doctor", "vision/resnt"], "vision/resnt"),
    (["doctor", "vision/resnet", "batch_sise=3"], "did you mean 'batch_size'"),
    (["plan"], "needs --data"),
    (["plan", "--params", "lots"], "--params 'lots'"),
    (["plan", "--kind", "video", "--rows", "10"], "--kind video"),
    (["plan", "--kind", "image"], "--rows"),
    (["plan", "--data", "/nonexistent/x.csv"], "no such file"),
    (["plan", "--params", "1B", "--gpu", "TPUv9"], "--gpu TPUv9"),
    (["plan", "--recipe", "llm/gpt"], "depth=N"),
])
def test_bad_input_one_line_exit_2(args, needle, capsys, tmp_path):
    assert main([*args, "--out", str(tmp_path)] if args[0] != "plan" else args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_plan_formulas(capsys):
    p = plan_cost.compute_plan(125e6)
    assert p["tokens"] == 2.5e9 and p["flops"] == 6 * 125e6 * 2.5e9
    assert p["inference_tokens"] == (12.5e9, 25e9) and p["train_memory_bytes"] == (2.25e9, 2.5e9)
    assert plan_cost.parse_count("1.3B") == 1.3e9 and plan_cost.parse_count("350k") == 350e3
    assert main(["plan", "--params", "125M", "--gpu", "A100", "--gpus", "8", "--mfu", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "2.5 B" in out and "1.88e+18" in out and "2.25 GB-2.5 GB" in out
    seconds = 1.875e18 / (312e12 * 0.5 * 8)  # FLOPs / (peak x MFU x GPUs)
    assert f"{seconds / 60:.3g} min" in out


def test_plan_recipe_counts_the_gpt_shape(capsys):
    from recipe_zoo.recipes.llm import gpt, models

    assert main(["plan", "--recipe", "llm/gpt", "depth=6"]) == 0
    out = capsys.readouterr().out
    shape = gpt.shape_at(gpt.GPTConfig(depth=6), 6, 1024)
    n = models.param_estimate(shape)
    assert f"{plan_cost.human(n)}" in out and f"{plan_cost.human(20 * n)}" in out and "activations:" in out
    assert math.isclose(plan_cost.activation_bytes(256, 16, 384, 6, 6), 6 * 256 * 16 * 384 * (34 + 5 * 6 * 256 / 384))


@pytest.mark.parametrize("kind, rows, recipe", [
    ("tabular", 20_000, "tabular/xgb"), ("tabular", 200_000, "tabular/xgb"), ("protein", 5_000, "protein/esm-embed"),
    ("protein", 50_000, "protein/esm-finetune"), ("image", 5_000, "vision/finetune"), ("image", 500_000, "vision/resnet"),
    ("text", 50_000, "llm/lora"), ("medical", 500, "medical/unet"), ("molecules", 1_000, "molecules/fp-xgb"),
    ("audio", 100, None),
])
def test_plan_recommends_by_kind_and_size(kind, rows, recipe):
    advice = plan_advice.recommend(kind, rows)
    assert advice.recipe == recipe and advice.reason
    if recipe:
        assert recipe in {r["name"] for r in registry.static_list()}


def test_plan_reads_the_data_type(tmp_path, capsys):
    (tmp_path / "mols.csv").write_text("smiles,y\n" + "CCO,1.0\n" * 30)
    (tmp_path / "seqs.csv").write_text("sequence,y\n" + "MKTAYIAKQRQISFVKSHFSRQ,0.5\n" * 12)
    (tmp_path / "table.csv").write_text("a,b,target\n" + "1,2,3\n" * 40)
    folder = tmp_path / "imgs" / "cat"
    folder.mkdir(parents=True)
    for i in range(3):
        (folder / f"{i}.png").write_bytes(b"\x89PNG")
    assert plan_advice.detect(tmp_path / "mols.csv")[:2] == ("molecules", 30)
    assert plan_advice.detect(tmp_path / "seqs.csv")[:2] == ("protein", 12)
    assert plan_advice.detect(tmp_path / "table.csv")[:2] == ("tabular", 40)
    assert plan_advice.detect(tmp_path / "imgs")[:2] == ("image", 3)
    assert main(["plan", "--data", str(tmp_path / "table.csv")]) == 0
    assert "zoo run tabular/xgb data=" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="empty folder"):
        plan_advice.detect(tmp_path / "empty")


def test_data_checks_on_frames_strings_and_tokens():
    import numpy as np
    import pandas as pd

    from recipe_zoo.core import diagnose
    from recipe_zoo.doctor_data import _shared_windows

    frame = pd.DataFrame({"a": [1.0, 2.0, np.nan], "b": ["x", "y", "z"]})
    assert list(diagnose.nonfinite_rows(frame)) == [2]
    hashes = diagnose.row_hashes(frame)
    assert hashes[0] != hashes[1] and diagnose.row_hashes(frame.iloc[[0]])[0] == hashes[0]
    assert diagnose.row_hashes(["CCO", "CCO", "CCN"])[0] == diagnose.row_hashes(["CCO"])[0]
    rng = np.random.default_rng(0)
    train = rng.integers(0, 1000, 10_000)
    val = np.concatenate([train[100:100 + 64 * 3], rng.integers(0, 1000, 64 * 7)])
    assert _shared_windows(train, val) == (3, 10)


def test_plan_prints_commands_that_run_as_printed(tmp_path, capsys):
    """A table: `start with` names its target (the last column) and runs; for trees `then` sweeps xgb_lr (no LR
    range test), also runnable."""
    import shlex

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3))
    table = tmp_path / "houses.csv"
    table.write_text("a,b,c,price\n" + "".join(f"{r[0]:.4f},{r[1]:.4f},{r[2]:.4f},{r.sum() * 3 + 1:.4f}\n"
                                                 for r in x))
    assert main(["plan", "--data", str(table)]) == 0
    out = capsys.readouterr().out
    start = next(line for line in out.splitlines() if line.startswith("start with:"))
    then = next(line for line in out.splitlines() if line.startswith("then:"))
    assert start.endswith("target=price") and " lr=" not in then and "xgb_lr=0.01,0.03,0.1" in then
    run = shlex.split(start.removeprefix("start with:"))[1:]  # zoo run tabular/xgb data=... target=price
    assert main([*run, "bagging=1", "n_estimators=20", "--budget", "2steps", "--out", str(tmp_path / "runs")]) == 0
    sweep = shlex.split(then.removeprefix("then:"))[1:]
    assert sweep[:2] == ["sweep", "tabular/xgb"] and "data=" + str(table) in sweep and "target=price" in sweep
