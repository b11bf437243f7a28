"""torchrun: two processes against one, resume under two processes, a failing rank, and the launcher.

Runs use gloo on the CPU over loopback (``zoo run --nproc 2`` starts torchrun itself)."""
import csv
import json
import os
import signal
import socket
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, roundtrip, stdout_lines, summary_block, zoo, zoo_in_process
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo import results
from recipe_zoo.cli import main

VISION = ["vision/resnet", "width=8", "batch_size=64", "eval_every=0.5", "log_every=0"]
STEPS = "30steps"


def train_rows(out, recipe):
    run_dir = next((out / recipe).iterdir())
    return run_dir, list(csv.DictReader(open(run_dir / "train.csv")))


def losses(rows):
    return [float(r["train_loss"]) for r in rows]


def test_shards_are_the_micro_batches_of_one_process_with_accumulation():
    """Rank r's batch at step i is one process's micro-batch 2i + r, with the same augmentation seed."""
    x = torch.arange(100)
    seeds = []

    def transform(batch, g):
        seeds.append(int(torch.randint(10**9, (1,), generator=g)))
        return batch

    one = TensorBatches((x,), 8, seed=3, transform=transform)
    expected = [(one.next_batch()[0], seeds[-1]) for _ in range(3 * one.batches_per_epoch)]
    ranks = []
    for rank in range(2):
        b = TensorBatches((x,), 8, seed=3, transform=transform)
        b.shard(rank, 2)
        assert b.batches_per_epoch == one.batches_per_epoch // 2 == 6
        ranks.append([(b.next_batch()[0], seeds[-1]) for _ in range(3 * b.batches_per_epoch)])
    merged = [pair for step in zip(*ranks) for pair in step]
    assert len(merged) == len(expected)
    assert all(torch.equal(a, b) and sa == sb for (a, sa), (b, sb) in zip(merged, expected))
    small = TensorBatches((torch.arange(10),), 64, seed=0)  # less data than a batch per process
    small.shard(1, 2)
    assert small.batch_size == 5 and small.batches_per_epoch == 1


def test_shards_are_the_micro_batches_of_accumulation_across_an_epoch_boundary():
    """60 samples at 8: 7 full micro-batches an epoch (and 4 left over), an odd number. One process accumulating
    two takes an epoch's last micro-batch with the next epoch's first in one step; two processes must too
    (not drop it), with the same augmentation seeds, and a rank resumed mid-way goes on the same."""
    x = torch.arange(60)
    seeds = []

    def transform(batch, g):
        seeds.append(int(torch.randint(10**9, (1,), generator=g)))
        return batch

    one = TensorBatches((x,), 8, seed=5, transform=transform)
    assert one.batches_per_epoch == 7
    expected = [(one.next_batch()[0], seeds[-1]) for _ in range(2 * 10)]  # 10 steps of 2: ~3 epochs
    ranks = []
    for rank in range(2):
        b = TensorBatches((x,), 8, seed=5, transform=transform)
        b.shard(rank, 2)
        drawn = [(b.next_batch()[0], seeds[-1]) for _ in range(4)]  # 4 steps: past the first boundary
        resumed = TensorBatches((x,), 8, seed=5, transform=transform)
        resumed.shard(rank, 2)
        resumed.load_state_dict(b.state_dict())
        drawn += [(resumed.next_batch()[0], seeds[-1]) for _ in range(6)]
        ranks.append(drawn)
    merged = [pair for step in zip(*ranks) for pair in step]
    assert len(merged) == len(expected)
    for i, ((a, sa), (b, sb)) in enumerate(zip(merged, expected)):
        assert torch.equal(a, b) and sa == sb, f"micro-batch {i} (step {i // 2 + 1}) differs"


def test_token_windows_shard_like_accumulation():
    from recipe_zoo.recipes.llm.token_windows import TokenWindows

    tokens = torch.arange(16 * 160 + 17)  # 160 windows: 40 micro-batches of 4, 20 steps of 2 ranks
    one = TokenWindows(tokens, 16, 4, seed=1)
    expected = [one.next_batch()[0] for _ in range(2 * one.batches_per_epoch)]
    shards = []
    for rank in range(2):
        w = TokenWindows(tokens, 16, 4, seed=1)
        w.shard(rank, 2)
        shards.append([w.next_batch()[0] for _ in range(w.batches_per_epoch * 2)])
    merged = [b for step in zip(*shards) for b in step]
    assert all(torch.equal(a, b) for a, b in zip(merged, expected)) and len(merged) == len(expected)


def test_launcher_refuses_what_torchrun_cannot_run(capsys):
    assert main(["run", "tabular/xgb", "--nproc", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "tabular/xgb does not run under torchrun" in err
    assert "xgboost.dask" in err
    assert main(["run", "vision/resnet", "--nproc", "0"]) == 2
    assert "--nproc 0" in capsys.readouterr().err
    assert main(["run", "vision/resnet", "widht=8", "--nproc", "2"]) == 2  # checked before torchrun starts
    assert "widht" in capsys.readouterr().err
    assert main(["show", "llm/gpt"]) == 0
    assert "scale-out: torchrun: DDP, or FSDP2 with fsdp=true" in capsys.readouterr().out
    assert main(["list"]) == 0
    listing = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert " DDP/FSDP " in listing["llm/gpt"] and " 1 process " in listing["tabular/xgb"]
    assert " DDP " in listing["medical/unet"]


@pytest.mark.slow
def test_two_processes_reproduce_one_vision(tmp_path):
    """2 processes x batch 64 (sqrt LR rule) == 1 process x batch 64 x 2 accumulation steps, augmentation on.

    Batch norm normalises over each process's batch (as over each micro-batch under accumulation): on CPU
    torch has no SyncBatchNorm, so a BN net matches accumulation rather than one batch of 128."""
    fp32 = "precision=fp32"  # two orders of summing the gradients: bf16's rounding of the weights would magnify them
    one = zoo_in_process("run", *VISION, fp32, "accum_steps=2", "--budget", "12steps", "--out", tmp_path / "one")
    two = zoo("run", *VISION, fp32, "lr_scaling=sqrt", "--nproc", "2", "--budget", "12steps", "--out", tmp_path / "two")
    assert one.returncode == 0 and two.returncode == 0, one.stderr[-2000:] + two.stderr[-2000:]
    block = summary_block(two.stdout)
    assert block["processes"] == "2" and block["global_batch"] == "128" and block["status"] == "ok"
    assert "x 2 processes" in results.all_rows(tmp_path / "two" / "index.sqlite")[0]["hardware"]
    _, rows_one = train_rows(tmp_path / "one", "vision/resnet")
    _, rows_two = train_rows(tmp_path / "two", "vision/resnet")
    assert [r["step"] for r in rows_one] == [r["step"] for r in rows_two]
    assert losses(rows_two) == pytest.approx(losses(rows_one), rel=1e-5)
    assert float(block["value"]) == pytest.approx(float(summary_block(one.stdout)["value"]), abs=0.02)
    roundtrip(train_rows(tmp_path / "two", "vision/resnet")[0])  # a 2-process run is a model like any other


def corpus(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n" * 250)
    return text


def gpt_args(tmp_path, depth=2):
    return ["llm/gpt", f"data={corpus(tmp_path)}", f"depth={depth}", "aspect=32", "head_dim=16", "seq_len=32",
            "batch_tokens=256", "eval_bytes=1500", "vocab_size=300", "samples=0", "compile=false"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["vision-ddp", "llm-fsdp"])
def test_two_process_run_interrupted_and_resumed_equals_uninterrupted(tmp_path, kind):
    """Ctrl-C reaches both ranks, which stop at the same step and checkpoint; --resume relaunches two and
    ends bit for bit where an uninterrupted run ends (FSDP: from a gathered checkpoint, resharded; the losses read
    every 3 steps)."""
    from safetensors.torch import load_file

    if kind == "vision-ddp":
        recipe, args = "vision/resnet", [*VISION, "--budget", STEPS]
    else:
        # losses read every 3 steps (as a GPU reads them every 16): the ranks close their windows together
        recipe, args = "llm/gpt", [*gpt_args(tmp_path, depth=1), "micro_batch=4", "fsdp=true", "log_every=0",
                                   "sync_every=3", "--budget", "60steps"]
    args = ["run", *args, "--nproc", "2"]
    ref = zoo(*args, "--out", tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-2000:]
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "recipe_zoo", *args, "--out", str(out)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    for line in stdout_lines(proc, timeout=600):
        if " | " in line and line.split()[1] == "step" and int(line.split()[2]) >= 15:
            os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C does: the launcher, torchrun and both workers
            break
    rest = "".join(stdout_lines(proc, timeout=600))
    assert proc.wait(timeout=120) == 130, rest
    assert summary_block(rest)["status"] == "interrupted"
    run_dir = next((out / recipe).iterdir())
    wrong = zoo_in_process("run", "--resume", run_dir, "--nproc", "1", "--out", out)
    assert wrong.returncode == 2 and "written by 2 process(es)" in wrong.stderr
    resumed = zoo("run", "--resume", run_dir, "--out", out)  # two processes again, from config.json
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout and summary_block(resumed.stdout)["processes"] == "2"
    ref_dir = next((tmp_path / "ref" / recipe).iterdir())
    a, b = load_file(ref_dir / "model.safetensors"), load_file(run_dir / "model.safetensors")
    # bit for bit: two jobs of the same kind on this machine (2 gloo ranks, the same threads) run the same ops in
    # the same order on the same batches; torch's allocator aligns every buffer alike (64 bytes)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for name in ("metrics.csv", "train.csv"):
        ref_rows, got_rows = (list(csv.DictReader(open(d / name))) for d in (ref_dir, run_dir))
        assert [{k: v for k, v in r.items() if k != "train_seconds"} for r in got_rows] == \
            [{k: v for k, v in r.items() if k != "train_seconds"} for r in ref_rows]
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["ok"]
    roundtrip(run_dir)  # resumed under 2 processes (FSDP: gathered weights), it predicts its test split again


@pytest.mark.slow
def test_two_processes_reproduce_one_llm_ddp_and_fsdp(tmp_path):
    """GPT: 2 processes x micro-batch 4 == 1 process x 8, under DDP (two steps traced) and under FSDP2."""
    common = [*gpt_args(tmp_path), "--budget", "8steps"]
    one = zoo_in_process("run", *common, "micro_batch=8", "--out", tmp_path / "one")
    ddp = zoo("run", *common, "micro_batch=4", "profile=2", "--nproc", "2", "--out", tmp_path / "ddp")
    fsdp = zoo("run", *common, "micro_batch=4", "fsdp=true", "--nproc", "2", "--out", tmp_path / "fsdp")
    for proc in (one, ddp, fsdp):
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "FSDP2: 2 blocks and the root sharded over 2 processes" in fsdp.stdout
    reference = losses(train_rows(tmp_path / "one", "llm/gpt")[1])
    assert len(reference) == 8 and reference[-1] < reference[0] - 1
    for out in ("ddp", "fsdp"):
        run_dir, rows = train_rows(tmp_path / out, "llm/gpt")
        got = losses(rows)  # the first step sees the same tokens; later ones drift by fp32 rounding only
        assert got[0] == pytest.approx(reference[0], rel=1e-6) and got == pytest.approx(reference, rel=1e-3), out
        assert json.loads((run_dir / "summary.json").read_text())["metrics"]["tokens"] == 8 * 256
    traced = next((tmp_path / "ddp" / "llm" / "gpt").iterdir()) / "profile.txt"  # rank 0 records, both count
    assert traced.read_text().startswith("2 optimizer steps traced")
    from safetensors.torch import load_file  # the FSDP export is the whole model, gathered

    full = load_file(next((tmp_path / "one" / "llm" / "gpt").iterdir()) / "model.safetensors")
    gathered = load_file(next((tmp_path / "fsdp" / "llm" / "gpt").iterdir()) / "model.safetensors")
    assert full.keys() == gathered.keys() and all(full[k].shape == gathered[k].shape for k in full)


FAILING = '''
import functools, os
from dataclasses import dataclass
import torch
from torch import nn
from recipe_zoo.core import schedule
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.api import recipe


@dataclass
class Config(LoopSettings):
    fail_step: int = 3


@recipe("failing-rank", config=Config, benchmark="synthetic", metric="loss", higher_is_better=False)
def train(cfg, run):
    x = torch.randn(256, 4)
    y = x.sum(1, keepdim=True)
    model = nn.Linear(4, 1)
    calls = [0]

    def loss_fn(m, batch):
        calls[0] += 1
        if os.environ["RANK"] == "1" and calls[0] > cfg.fail_step:
            raise RuntimeError("planted failure on rank 1")
        return nn.functional.mse_loss(m(batch[0]), batch[1])

    result = fit(model, torch.optim.SGD(model.parameters(), lr=0.01), TensorBatches((x, y), 16), loss_fn,
                 run, device=torch.device("cpu"), evaluate=lambda m: {"loss": 0.0},
                 update_hparams=functools.partial(schedule.apply_schedules, lr=schedule.make_schedule("constant")),
                 settings=LoopSettings.of(cfg))
    return {**result.stats(), **result.metrics}
'''


@pytest.mark.slow
def test_one_failing_rank_ends_the_job_and_its_row_says_so(tmp_path):
    """Rank 1 fails at its 4th step of 100,000: the job ends (about 10 s here, startup included) rather than rank 0
    waiting out the collective timeout (600 s) for it; the 180 s allowed are 18x the first and a third of the
    second. Rank 0's row ends crash (or interrupted, where torchrun's SIGTERM reached it at a step), never left
    running: when rank 0 dies without finishing, the launcher closes its row."""
    recipe = tmp_path / "failing.py"
    recipe.write_text(FAILING)
    try:
        proc = zoo("run", recipe, "--budget", "100000steps", "--nproc", "2", "--out", tmp_path / "runs", timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("a failing rank left the job running past 180 s: the other rank waits out the collective")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "[rank 1] crash" in proc.stderr and "planted failure on rank 1" in proc.stderr
    rows = results.all_rows(tmp_path / "runs" / "index.sqlite")
    assert [r["status"] for r in rows] in (["crash"], ["interrupted"]), rows


def test_a_rank_0_that_dies_mid_run_leaves_no_running_row(tmp_path):
    """The launcher's side of it, on the row a killed rank 0 leaves: ``running`` becomes ``crash``; a finished
    row is left as it is."""
    from recipe_zoo.launch import _close_unfinished

    index = tmp_path / "index.sqlite"
    results.upsert(index, {"run_id": "a", "status": "running", "started": "2026-01-01T00:00:00"})
    results.upsert(index, {"run_id": "b", "status": "ok", "started": "2026-01-01T00:00:01"})
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    results.upsert(index, {"run_id": "c", "status": "running", "started": "2026-01-01T00:00:02",
                           "pid": int(gone.stdout), "host": socket.gethostname()})  # read back as killed
    for run_id in ("a", "b", "c"):
        (tmp_path / "run.json").write_text(json.dumps({"index": str(index), "run_id": run_id}))
        _close_unfinished(tmp_path / "run.json")
    assert [(r["run_id"], r["status"]) for r in results.all_rows(index)] == [("a", "crash"), ("b", "ok"),
                                                                             ("c", "crash")]
    _close_unfinished(tmp_path / "none.json")  # rank 0 died before its row: nothing to close
