"""Faults a long run meets: killed (SIGKILL, SIGTERM, mid-checkpoint), disk full, out of memory, data gone,
many runs at once. Each must end with a clear answer and nothing lost or corrupted."""
import csv
import errno
import itertools
import json
import multiprocessing
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import ROOT, roundtrip, stdout_lines, small_run_args, summary_block, without_timing, zoo, zoo_in_process
from test_board import row
from recipe_zoo import board, board_render, results
from recipe_zoo.core import checkpoint, precision

# Under a step budget a resumed run must end bit for bit where an uninterrupted one ends. A checkpoint is
# written before every step (checkpoint_every=0), so the kill lands anywhere: between steps or mid-write.
# (overrides, budget, the step to kill at, in which of the run's fits: folds and ensemble members train one by one)
KILL_CASES = {
    "vision/resnet": (["eval_every=0.5"], "60steps", 25, 0),
    "llm/gpt": (["eval_every=0.5"], "40steps", 15, 0),
    "tabular/mlp": (["eval_every=0.25"], "60steps", 25, 0),  # the best validation state must survive the resume
    "diffusion/flow": (["eval_every=0.5"], "30steps", 12, 0),  # caught FLOP counting in a resumed step (numerics)
    "contrastive/byol": (["eval_every=0.5", "batch_size=16"], "16steps", 6, 0),  # the target network, its momentum
    "llm/lora": (["eval_every=0.5"], "20steps", 8, 0),  # only the adapter trains; its dropout draws from the RNG
    # killed in fold 1: fold 0 is finished, its results must be those of the uninterrupted run
    "medical/unet": (["folds=2", "batch_size=2", "eval_every=0.5"], "12steps", 3, 1),
    # killed in fold 1's second member (the fourth of six fits): three finished models before it
    "molecules/dmpnn": (["folds=3", "ensemble=2", "eval_every=0.5"], "24steps", 2, 3),
}


def kill_case_args(recipe: str, tmp_path: Path) -> list[str]:
    """A recipe's tiny-run overrides; medical/unet on eight 48 px PNG cases (its synthetic set's forty 128 px cases
    take most of a minute to score, twice a fold)."""
    if recipe == "medical/unet":
        from test_medical import png_folder

        return [*small_run_args(recipe, tmp_path), f"data={png_folder(tmp_path / 'cells', n=8)}"]
    return small_run_args(recipe, tmp_path)


def start(args: list, out: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "recipe_zoo", "run", *map(str, args), "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def wait_for_step(proc: subprocess.Popen, step: int, checkpoint_of: Path | None = None, percent: float = 0,
                  fit: int = 0) -> None:
    """Read progress lines (log_every=0 prints one per step) until ``step`` and ``percent`` of the budget of the
    run's ``fit``-th training (from 0; each fold or ensemble member counts its steps from 1 again); with
    ``checkpoint_of`` (the runs root) also until a checkpoint exists."""
    seen, last = 0, 0
    for line in stdout_lines(proc, timeout=300):
        parts = line.split()  # "HH:MM:SS step N | P% | loss ..."
        if " | " in line and len(parts) > 4 and parts[1] == "step":
            seen += int(parts[2]) < last  # a step count that starts again: the next training
            last = int(parts[2])
            if seen == fit and last >= step and float(parts[4].rstrip("%")) >= percent:
                if checkpoint_of is None or any(checkpoint_of.rglob("checkpoint.pt")):
                    return
    raise AssertionError(f"the run ended before step {step} of training {fit} (exit {proc.wait()})")


def rows_without_timing(run_dir: Path, name: str) -> list[dict]:
    with open(run_dir / name) as f:
        return [{k: v for k, v in r.items() if k != "train_seconds"} for r in csv.DictReader(f)]


def the_run_dir(out: Path, recipe: str) -> Path:
    (run_dir,) = (out / recipe).iterdir()
    return run_dir


def assert_same_run(ref_dir: Path, run_dir: Path) -> None:
    """The same rows (steps, losses, metrics; only timings differ), weights (every fold's and member's, an
    adapter's) and test predictions, bit for bit: the same code on the same CPU in the same order of operations."""
    from safetensors.torch import load_file

    for name in ("metrics.csv", "train.csv"):
        assert rows_without_timing(run_dir, name) == rows_without_timing(ref_dir, name), name
    weights = sorted(p.relative_to(ref_dir) for p in ref_dir.rglob("*.safetensors"))
    assert weights == sorted(p.relative_to(run_dir) for p in run_dir.rglob("*.safetensors"))
    for name in weights:
        a, b = load_file(ref_dir / name), load_file(run_dir / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    if (ref_dir / "predictions.csv").exists():
        assert (run_dir / "predictions.csv").read_text() == (ref_dir / "predictions.csv").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("recipe", list(KILL_CASES))
def test_sigkill_then_resume_equals_uninterrupted(tmp_path, recipe):
    extra, steps, kill_at, fit = KILL_CASES[recipe]
    args = [recipe, *kill_case_args(recipe, tmp_path), *extra, "log_every=0", "checkpoint_every=0",
            "--budget", steps, "--seed", "3"]
    # the uninterrupted run and the resume in this process (the killed run is a process of its own): the same
    # code on the same thread, without the seconds a process spends importing
    ref = zoo_in_process("run", *args, "--out", tmp_path / "ref")
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    out = tmp_path / "runs"
    proc = start(args, out)
    wait_for_step(proc, kill_at, checkpoint_of=out, fit=fit)
    proc.kill()  # SIGKILL: no handler runs, no last checkpoint, the index row is left "running" by the run
    assert proc.wait(timeout=60) == -signal.SIGKILL
    run_dir = the_run_dir(out, recipe)
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["killed"]  # its pid is gone
    resumed = zoo_in_process("run", "--resume", run_dir, "--out", out)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout
    if fit:  # the part it was killed in goes on from its own checkpoint, not from its first step
        assert f"resumed from {run_dir / f'checkpoint-part{fit}.pt'} at step" in resumed.stdout, resumed.stdout[-3000:]
    assert summary_block(resumed.stdout)["value"] == summary_block(ref.stdout)["value"]
    assert_same_run(the_run_dir(tmp_path / "ref", recipe), run_dir)
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["ok"]
    assert not list(run_dir.glob(".checkpoint.pt.*.tmp"))  # a temp file from a kill mid-write is cleaned up
    if (run_dir / "predictions.csv").exists():  # a resumed run is a model too (diffusion keeps no predictions)
        with precision.torch_state_kept():  # predict sets the speed switches a run sets (llm/lora)
            roundtrip(run_dir)


@pytest.mark.slow
def test_ctrl_c_and_sigterm_checkpoint_exit_130_143_and_resume_exactly(tmp_path):
    args = ["tabular/mlp", *small_run_args("tabular/mlp", tmp_path), "eval_every=0.25", "log_every=0",
            "--budget", "60steps", "--seed", "4"]
    ref = zoo_in_process("run", *args, "--out", tmp_path / "ref")  # as in the SIGKILL cases: here, no imports
    assert ref.returncode == 0, ref.stderr[-2000:]
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        out = tmp_path / sig.name
        proc = start(args, out)
        wait_for_step(proc, 20)
        proc.send_signal(sig)
        rest = "".join(stdout_lines(proc, timeout=300))
        assert proc.wait(timeout=60) == code, rest
        assert summary_block(rest)["status"] == "interrupted" and "Resume with: zoo run --resume" in rest
        assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["interrupted"]
        resumed = zoo_in_process("run", "--resume", the_run_dir(out, "tabular/mlp"), "--out", out)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert summary_block(resumed.stdout)["value"] == summary_block(ref.stdout)["value"]
        assert_same_run(the_run_dir(tmp_path / "ref", "tabular/mlp"), the_run_dir(out, "tabular/mlp"))
        assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["ok"]  # the same row, updated


@pytest.mark.slow
def test_time_budget_resume_continues_the_schedule_from_the_saved_time(tmp_path):
    """A time budget ends at another step by nature; the resumed run must go on from the time already trained,
    not start its schedule again."""
    out = tmp_path / "runs"
    proc = start(["vision/resnet", "width=8", "eval_every=0", "log_every=0", "--budget", "4s"], out)
    wait_for_step(proc, 5, percent=30)
    proc.send_signal(signal.SIGINT)
    "".join(stdout_lines(proc, timeout=300))
    assert proc.wait(timeout=60) == 130
    run_dir = the_run_dir(out, "vision/resnet")
    with open(run_dir / "train.csv") as f:
        before = list(csv.DictReader(f))
    saved = checkpoint.load(run_dir / "checkpoint.pt")["loop"]["train_seconds"]  # interrupted: less than the budget
    assert float(before[-1]["train_seconds"]) <= round(saved, 3) < 4  # the rows' times: to 3 places
    resumed = zoo_in_process("run", "--resume", run_dir, "--out", out)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"({saved:.1f}s trained)" in resumed.stdout  # the resumed clock starts from the saved time
    with open(run_dir / "train.csv") as f:
        rows = list(csv.DictReader(f))
    after = rows[len(before):]
    assert after and rows[:len(before)] == before
    seconds = [float(r["train_seconds"]) for r in rows]
    assert seconds == sorted(seconds) and float(after[0]["train_seconds"]) > saved
    # The schedule's progress is the time trained over the budget, before and after the resume alike (rounded to
    # 4 places in the rows, 3 for the time): the schedule goes on from the saved time, it does not restart.
    assert all(abs(float(r["progress"]) - min(1.0, float(r["train_seconds"]) / 4)) < 1e-3 for r in rows)
    lr = [float(r["lr"]) for r in rows]  # the LR curve goes on where it was; a restarted schedule would jump back
    assert abs(lr[len(before)] - lr[len(before) - 1]) < abs(lr[len(before)] - lr[0])
    assert float(summary_block(resumed.stdout)["train_seconds"]) >= 4  # the whole budget, counting the saved time


def test_kill_during_checkpoint_write_keeps_the_previous_checkpoint(tmp_path):
    """A process SIGKILLed halfway through writing a checkpoint: the previous one still loads."""
    path = tmp_path / "checkpoint.pt"
    script = textwrap.dedent(f"""
        import time, torch
        from recipe_zoo.core import checkpoint
        checkpoint.save_atomic({{"w": torch.ones(4), "step": 1}}, {str(path)!r})
        real = torch.save
        def slow_save(obj, f):  # write half of a real checkpoint, then stall: the kill lands mid-write
            import io
            buf = io.BytesIO()
            real(obj, buf)
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            f.flush()
            print("writing", flush=True)
            time.sleep(60)
        torch.save = slow_save
        checkpoint.save_atomic({{"w": torch.zeros(1 << 20), "step": 2}}, {str(path)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert next(stdout_lines(proc, timeout=60)).strip() == "writing"
    proc.kill()
    proc.wait(timeout=30)

    (partial,) = tmp_path.glob(".checkpoint.pt.*.tmp")
    assert partial.stat().st_size > 0
    blob = checkpoint.load(path)
    assert blob["step"] == 1 and torch.equal(blob["w"], torch.ones(4))
    checkpoint.save_atomic({"step": 3}, path)  # the next save removes what the killed writer left
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))


def test_a_checkpoint_the_disk_cannot_hold_is_one_line_and_leaves_no_partial_file(tmp_path):
    """Every file may grow to 256 KiB only: the vision checkpoint (about 0.4 MB) cannot be written, and the real
    write fails (EFBIG). The error must name the file and the fix, exit 1, and leave no half checkpoint. (A full
    disk at a later checkpoint, then a real resume: the test after this one.)"""
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "recipe_zoo", "run", "vision/resnet", "width=8", "--budget", "10steps",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          preexec_fn=_limit_file_size)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "checkpoint.pt: File too large; free some space or give --out another disk" in lines[0]
    run_dir = the_run_dir(out, "vision/resnet")
    assert not list(run_dir.glob("*checkpoint.pt*"))  # no partial checkpoint, no temp file
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["crash"]
    assert summary_block(proc.stdout)["status"] == "crash"


def disk_full_from(monkeypatch, first: int) -> None:
    """Checkpoint writes from the ``first``-th on (counting from 0) fail as on a full disk: the file's ``write``
    raises OSError(ENOSPC), met by the checkpoint writer where it meets a real one (inside ``torch.save``)."""

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            self.f.flush()

    real, saves = checkpoint._Writes, itertools.count()
    monkeypatch.setattr(checkpoint, "_Writes", lambda f: real(f if next(saves) < first else FullDisk(f)))


def run_in_process(out: Path, *args) -> subprocess.CompletedProcess:
    """``zoo run ARGS --out OUT`` in this process (one thread): every run of a test that compares runs bit for bit
    is made the same way."""
    return zoo_in_process("run", *args, "--out", out)


MLP_RUN = ["tabular/mlp", "data=wine", "hidden=16", "eval_every=0.25", "checkpoint_every=0", "--budget", "30steps",
           "--seed", "3"]  # a checkpoint before every step; the best validation state travels in it


def test_full_disk_at_a_later_checkpoint_then_resume_equals_uninterrupted(tmp_path, monkeypatch):
    """Ten checkpoints are written, the eleventh meets a full disk: one line naming the file, exit 1, status crash,
    and the last checkpoint written is intact: --resume then ends bit for bit where an uninterrupted run ends
    (every run in this process: the same code path and order of operations)."""
    ref = run_in_process(tmp_path / "ref", *MLP_RUN)
    assert ref.returncode == 0, ref.stderr[-2000:]
    out = tmp_path / "runs"
    with monkeypatch.context() as m:
        disk_full_from(m, 10)
        full = run_in_process(out, *MLP_RUN)
    run_dir = the_run_dir(out, "tabular/mlp")
    assert full.returncode == 1, full.stdout[-2000:] + full.stderr[-2000:]
    assert full.stderr.strip().splitlines() == [
        f"zoo: error: {run_dir / 'checkpoint.pt'}: No space left on device; free some space or give --out another "
        f"disk; the last checkpoint is intact: zoo run --resume {run_dir}"]
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["crash"]
    assert checkpoint.load(run_dir / "checkpoint.pt")["loop"]["step"] == 9  # written before step 9
    assert not list(run_dir.glob(".checkpoint.pt.*.tmp"))
    resumed = zoo_in_process("run", "--resume", run_dir, "--out", out)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"resumed from {run_dir / 'checkpoint.pt'} at step 9" in resumed.stdout
    assert summary_block(resumed.stdout)["value"] == summary_block(ref.stdout)["value"]
    assert_same_run(the_run_dir(tmp_path / "ref", "tabular/mlp"), run_dir)
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["ok"]


def cut_short(path: Path, size: int = 2048) -> None:
    """The file as a copy cut short leaves it: its first ``size`` bytes."""
    path.write_bytes(path.read_bytes()[:size])


def test_a_damaged_checkpoint_resumes_from_the_one_before_it(tmp_path):
    """checkpoint.pt cut to 2 kB (a copy cut short): --resume reads checkpoint.prev.pt, written a step earlier,
    says so, keeps only the rows up to its step, sets the damaged file aside, and ends bit for bit where the run
    ended before (both runs in this process)."""
    out = tmp_path / "runs"
    first = run_in_process(out, *MLP_RUN)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = the_run_dir(out, "tabular/mlp")
    ref_dir = tmp_path / "ref"
    shutil.copytree(run_dir, ref_dir)
    assert checkpoint.load(run_dir / "checkpoint.prev.pt")["loop"]["step"] == 29  # the save before the last
    cut_short(run_dir / "checkpoint.pt")
    resumed = zoo_in_process("run", "--resume", run_dir, "--out", out)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"warning: {run_dir / 'checkpoint.pt'}: cannot be read (" in resumed.stdout
    assert f"resumed from {run_dir / 'checkpoint.prev.pt'} at step 29" in resumed.stdout
    assert_same_run(ref_dir, run_dir)
    assert summary_block(resumed.stdout)["value"] == summary_block(first.stdout)["value"]
    assert (run_dir / "checkpoint.damaged.pt").stat().st_size == 2048
    assert checkpoint.load(run_dir / "checkpoint.pt")["loop"]["step"] == 30
    assert checkpoint.load(run_dir / "checkpoint.prev.pt")["loop"]["step"] == 29  # the good one, kept


def test_a_damaged_checkpoint_with_none_before_it_is_one_line(tmp_path, monkeypatch):
    """A run stopped by a full disk keeps its last checkpoint only (the one before it was removed to make room);
    that one then cut short: --resume is one line naming the file, exit 2, and the run's row stays what it was
    (crash), never ok."""
    out = tmp_path / "runs"
    with monkeypatch.context() as m:
        disk_full_from(m, 4)
        assert run_in_process(out, *MLP_RUN).returncode == 1
    run_dir = the_run_dir(out, "tabular/mlp")
    assert not (run_dir / "checkpoint.prev.pt").exists()
    cut_short(run_dir / "checkpoint.pt")
    resumed = zoo_in_process("run", "--resume", run_dir, "--out", out)
    assert resumed.returncode == 2 and "Traceback" not in resumed.stderr
    (line,) = resumed.stderr.strip().splitlines()
    assert line.startswith(f"zoo: error: {run_dir / 'checkpoint.pt'}: cannot be read (")
    assert line.endswith("; no previous checkpoint (checkpoint.prev.pt) is kept beside it; the run cannot be "
                         "resumed: start it again")
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["crash"]
    cut_short(run_dir / "checkpoint.pt", 0)  # an empty file: the same answer
    assert zoo_in_process("run", "--resume", run_dir, "--out", out).returncode == 2


def test_write_errors_name_the_file_and_the_fix(tmp_path):
    from recipe_zoo.memory import write_advice

    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "checkpoint.pt"))
    assert write_advice(full, tmp_path, has_checkpoint=True) == (
        f"{tmp_path / 'checkpoint.pt'}: No space left on device; free some space or give --out another disk; "
        f"the last checkpoint is intact: zoo run --resume {tmp_path}")
    read_only = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "metrics.csv"))
    assert write_advice(read_only, tmp_path, has_checkpoint=False) == (
        f"{tmp_path / 'metrics.csv'}: Read-only file system; check its permissions or give --out another folder")


def test_unwritable_output_folder_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = zoo("run", "tabular/mlp", "--budget", "2steps", "--out", blocker / "runs")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"zoo: error: {blocker / 'runs'}: cannot create the run directory: Not a directory"]
    if os.geteuid() != 0:  # root writes through permission bits
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        proc = zoo("run", "tabular/mlp", "--budget", "2steps", "--out", locked)
        assert proc.returncode == 2 and "Permission denied" in proc.stderr


def test_out_of_memory_in_the_first_step_names_the_batch_and_the_fixes(tmp_path):
    """A real allocation failure: the address space is capped 1 GiB above what the process has mapped
    once torch is loaded, and the micro-batch needs more."""
    text = tmp_path / "corpus.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 6000)
    argv = ["run", "llm/gpt", f"data={text}", "depth=2", "aspect=128", "head_dim=32", "seq_len=128",
            "micro_batch=512", "batch_tokens=65536", "eval_bytes=1500", "vocab_size=300", "samples=0", "compile=false",
            "--budget", "2steps", "--out", str(tmp_path / "runs")]
    script = textwrap.dedent(f"""
        import resource, sys
        import torch
        from recipe_zoo.cli import main
        import recipe_zoo.recipes.llm.gpt
        mapped = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (1 << 30), resource.RLIM_INFINITY))
        sys.exit(main({argv!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("zoo: error: out of memory at step 0 with a micro-batch of 512"), line
    assert "can't allocate memory" in line
    assert "Try, in order: 1) micro_batch=256 (accumulation doubles to keep batch_tokens); " \
           "2) activation_checkpointing=true" in line and line.endswith("a smaller model or shorter inputs")
    assert [r["status"] for r in results.all_rows(tmp_path / "runs" / "index.sqlite")] == ["crash"]


OOMY_RECIPE = '''
from dataclasses import dataclass
import torch
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.api import recipe


@dataclass
class Config(LoopSettings):
    batch_size: int = 16  # micro-batch
    fits: int = 4  # the largest micro-batch the "accelerator" holds


@recipe("mine/oomy", config=Config, benchmark="synthetic", metric="loss", higher_is_better=False, budget="4steps")
def train(cfg, run):
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    model = torch.nn.Linear(4, 1)

    def loss_fn(m, b):
        if len(b[0]) > cfg.fits:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return torch.nn.functional.mse_loss(m(b[0]), b[1])

    res = fit(model, torch.optim.SGD(model.parameters(), lr=0.05), TensorBatches((x, y), cfg.batch_size, seed=0),
              loss_fn, run, device=torch.device("cpu"), settings=LoopSettings.of(cfg), update_hparams=lambda *a: 1.0,
              evaluate=lambda m: {"loss": torch.nn.functional.mse_loss(m(x), y).item()})
    torch.save(model.state_dict(), run.dir / "weights.pt")
    return {**res.stats(), **res.metrics}
'''


def test_an_accelerator_out_of_memory_in_the_first_step_halves_the_micro_batch(tmp_path, capfd):
    """An accelerator's out-of-memory error (torch.OutOfMemoryError) in step 0: the run starts again with half the
    micro-batch and twice the accumulation until it fits, says so, records the config that trained, and trains as
    a run started with that config does (reseeded, bit for bit). In-process: the runs cost no imports."""
    from recipe_zoo.cli import main

    recipe_file = tmp_path / "oomy.py"
    recipe_file.write_text(OOMY_RECIPE)
    assert main(["run", str(recipe_file), "--out", str(tmp_path / "a")]) == 0
    out = capfd.readouterr().out
    assert "micro-batch of 16: starting again with batch_size=8 accum_steps=2" in out
    assert "micro-batch of 8: starting again with batch_size=4 accum_steps=4" in out
    (run_a,) = (tmp_path / "a" / "mine" / "oomy").iterdir()
    config = json.loads((run_a / "config.json").read_text())["config"]
    assert (config["batch_size"], config["accum_steps"]) == (4, 4)
    assert main(["run", str(recipe_file), "batch_size=4", "accum_steps=4", "--out", str(tmp_path / "b")]) == 0
    (run_b,) = (tmp_path / "b" / "mine" / "oomy").iterdir()
    assert all(torch.equal(u, v) for u, v in zip(torch.load(run_a / "weights.pt").values(),
                                                  torch.load(run_b / "weights.pt").values()))
    rows = [without_timing(list(csv.DictReader(open(run / "metrics.csv")))) for run in (run_a, run_b)]
    assert rows[0] == rows[1] and len(rows[0]) > 0
    capfd.readouterr()
    assert main(["run", str(recipe_file), "fits=0", "--out", str(tmp_path / "c")]) == 1  # nothing fits: the fixes
    out, err = capfd.readouterr()
    assert "starting again with batch_size=1 accum_steps=16" in out
    (line,) = err.strip().splitlines()
    assert line.startswith("zoo: error: out of memory at step 0 with a micro-batch of 1 (x16 accumulation)")


@pytest.mark.slow
def test_data_deleted_mid_run(tmp_path):
    """The data is read once at the start: deleting the file mid-run changes nothing in that run. Resuming
    after it is gone names the file (exit 2); with the file back the run resumes and ends ok."""
    data = tmp_path / "table.csv"
    rng = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3, generator=rng)
    data.write_text("a,b,c,y\n" + "".join(f"{a:.4f},{b:.4f},{c:.4f},{a + b * c:.4f}\n" for a, b, c in x.tolist()))
    content = data.read_bytes()
    out = tmp_path / "runs"
    args = ["tabular/mlp", f"data={data}", "target=y", "hidden=16", "log_every=0", "--budget", "400steps"]
    proc = start(args, out)
    wait_for_step(proc, 10)
    data.unlink()
    rest = "".join(stdout_lines(proc, timeout=300))
    assert proc.wait(timeout=120) == 0, rest
    assert summary_block(rest)["status"] == "ok"
    data.write_bytes(content)
    proc = start(args, out)
    wait_for_step(proc, 10)
    proc.send_signal(signal.SIGINT)
    "".join(stdout_lines(proc, timeout=300))
    assert proc.wait(timeout=60) == 130
    data.unlink()
    run_dir = max((out / "tabular" / "mlp").iterdir())
    gone = zoo_in_process("run", "--resume", run_dir, "--out", out)
    assert gone.returncode == 2 and "Traceback" not in gone.stderr
    assert str(data) in gone.stderr.strip().splitlines()[-1]
    data.write_bytes(content)
    back = zoo_in_process("run", "--resume", run_dir, "--out", out)
    assert back.returncode == 0 and summary_block(back.stdout)["status"] == "ok"


USER_RECIPE = '''
from dataclasses import dataclass
import torch
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.loop import fit
from recipe_zoo.core.schedule import apply_schedules, make_schedule
from recipe_zoo.core.api import recipe


@dataclass
class Config:
    lr: float = 0.05  # LR


@recipe("mine/many", config=Config, benchmark="synthetic", metric="loss", higher_is_better=False, budget="20steps")
def train(cfg, run):
    g = torch.Generator().manual_seed(run.seed)
    x = torch.randn(64, 4, generator=g)
    y = x.sum(1, keepdim=True)
    model = torch.nn.Linear(4, 1)
    loss_fn = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])
    res = fit(model, torch.optim.SGD(model.parameters(), lr=cfg.lr), TensorBatches((x, y), 16, seed=run.seed),
              loss_fn, run, device=torch.device("cpu"), evaluate=lambda m: {"loss": loss_fn(m, (x, y)).item()},
              update_hparams=lambda o, p, s: apply_schedules(o, p, s, lr=make_schedule("constant")))
    return {**res.stats(), **res.metrics}
'''


@pytest.mark.slow
def test_eight_runs_at_once_all_land_in_the_index(tmp_path):
    recipe = tmp_path / "many.py"
    recipe.write_text(USER_RECIPE)
    out = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "recipe_zoo", "run", str(recipe), "--seed", str(seed), "--out", str(out)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in range(8)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [e[-1500:] for _, e in outputs]
    rows = results.all_rows(out / "index.sqlite")
    assert len(rows) == 8 and len({r["run_id"] for r in rows}) == 8
    assert sorted(r["seed"] for r in rows) == list(range(8))
    assert all(r["status"] == "ok" and r["metric"] is not None and r["finished"] for r in rows)
    values = {r["seed"]: r["metric"] for r in rows}
    for (stdout, _), seed in zip(outputs, range(8)):
        assert float(summary_block(stdout)["value"]) == pytest.approx(values[seed], abs=5e-5)  # printed to 4 places
    with sqlite3.connect(out / "index.sqlite") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _rewrite_board(n: int) -> None:
    for _ in range(n):
        board_render.write_board()


def test_leaderboard_is_replaced_whole_under_concurrent_writers(tmp_path, monkeypatch):
    """Four processes rewrite the board's pages (leaderboard.md, leaderboard.html, the archive) while they are read:
    every read of each is its one complete text. The writers are forked from this process after its own first
    write, so that none spends seconds importing the recipes the board names (spawned, the four took most of a
    minute on 2 cores); they write files and nothing else."""
    monkeypatch.setenv("ZOO_BOARD_DIR", str(tmp_path))
    board.append_rows([row(f"r{i}", i / 200) for i in range(200)])
    board_render.write_board()
    pages = ["leaderboard-protocol1.md", "leaderboard.html", "leaderboard.md"]
    expected = {name: (tmp_path / name).read_text() for name in pages}
    assert expected["leaderboard.html"].rstrip().endswith("</html>") and "<svg class=\"chart\"" in \
        expected["leaderboard.html"]
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_rewrite_board, args=(6,)) for _ in range(4)]
    for w in writers:
        w.start()
    reads = 0
    while any(w.is_alive() for w in writers) or reads < 50:
        for name in ("leaderboard.md", "leaderboard.html"):
            assert (tmp_path / name).read_text() == expected[name], name
        reads += 1
    for w in writers:
        w.join()
        assert w.exitcode == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == pages  # no temp file left
    assert {name: (tmp_path / name).read_text() for name in pages} == expected


def test_debug_shows_the_traceback_the_one_line_hides(tmp_path):
    from recipe_zoo.cli import main
    from recipe_zoo.core.errors import ZooError

    assert main(["run", "tabular/mlp", "lrr=1", "--out", str(tmp_path)]) == 2
    with pytest.raises(ZooError, match="unknown key 'lrr'; did you mean 'lr'"):
        main(["--debug", "run", "tabular/mlp", "lrr=1", "--out", str(tmp_path)])
