"""Folders are data: an --out the zoo did not write is never wiped, mixed into or overwritten (zoo data prepare,
zoo export, zoo predict and its files' folder), and names read from a run's card stay inside the run folder."""
import json
from pathlib import Path

import pytest

from conftest import summary_block, zoo_in_process


def refused(r, *needles):
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("zoo: error: "), r.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    r = zoo_in_process("run", "tabular/mlp", "data=wine", "hidden=16", "--budget", "4steps", "--out", out)
    assert r.returncode == 0, r.stderr[-2000:]
    return Path(summary_block(r.stdout)["run_dir"])


def test_prepare_never_replaces_a_folder_it_did_not_write(tmp_path):
    text = tmp_path / "notes"
    text.mkdir()
    (text / "a.txt").write_text("First Citizen: speak, speak. " * 400)
    args = ["data", "prepare", "llm/gpt", f"data={text}", "tokenizer=bytes"]
    work = tmp_path / "work"
    work.mkdir()
    (work / "thesis.tex").write_text("years of it")
    refused(zoo_in_process(*args, "--out", work), f"--out {work}: holds files the zoo did not write")
    refused(zoo_in_process(*args, "--out", text), f"--out {text}: holds files the zoo did not write")
    assert (work / "thesis.tex").read_text() == "years of it" and (text / "a.txt").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert zoo_in_process(*args, "--out", empty).returncode == 0 and (empty / "prepared.json").is_file()
    again = zoo_in_process(*args, "--out", empty, "--force")  # the zoo's own prepared folder: made again
    assert again.returncode == 0, again.stderr[-2000:]


def test_export_writes_only_into_new_empty_or_its_own_folders(mlp_run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    refused(zoo_in_process("export", mlp_run, "--format", "safetensors", "--out", mine), f"--out {mine}: holds files the zoo did not write")
    out = tmp_path / "export"
    assert zoo_in_process("export", mlp_run, "--format", "safetensors", "--out", out).returncode == 0
    assert json.loads((out / ".zoo-written").read_text())["format"] == "safetensors"
    assert zoo_in_process("export", mlp_run, "--format", "safetensors", "--out", out).returncode == 0  # its own folder: written again


@pytest.mark.parametrize("name, needle", [
    ("../outside.txt", "is not a path inside"), ("/etc/hostname", "is not a path inside"),
    ("link.bin", "resolves outside"),
], ids=["dotdot", "absolute", "link-out"])
def test_names_a_card_gives_must_stay_inside_the_run(mlp_run, tmp_path, name, needle):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(mlp_run, run)
    (tmp_path / "outside.txt").write_text("not the run's")
    (run / "link.bin").symlink_to(tmp_path / "outside.txt")
    card = json.loads((run / "model.json").read_text())
    (run / "model.json").write_text(json.dumps({**card, "files": [*card.get("files", []), name]}))
    refused(zoo_in_process("export", run, "--format", "safetensors", "--out", tmp_path / "x"), "model.json", repr(name), needle)
    assert not (tmp_path / "x" / "outside.txt").exists()


def test_predict_never_overwrites_a_file_it_did_not_write(mlp_run, tmp_path):
    from sklearn.datasets import load_wine

    data = tmp_path / "new.csv"
    load_wine(as_frame=True).frame.head(5).to_csv(data, index=False)
    before = data.read_text()
    refused(zoo_in_process("predict", mlp_run, f"data={data}", "--out", data),
            f"--out {data}: exists, and the zoo did not write it")
    assert data.read_text() == before
    out = tmp_path / "p.csv"
    assert zoo_in_process("predict", mlp_run, f"data={data}", "--out", out).returncode == 0
    assert zoo_in_process("predict", mlp_run, f"data={data}", "--out", out).returncode == 0  # its own: replaced
    assert json.loads((tmp_path / ".zoo-written.json").read_text()) == ["p.csv"]


def test_a_predictions_files_folder_is_never_a_users_folder(mlp_run, tmp_path):
    """Masks and samples go beside the CSV, in a folder named as it: `--out ./photos.csv` must not write into the
    user's ./photos."""
    from recipe_zoo.core import artifact
    from recipe_zoo.core.errors import ZooError

    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "cat.png").write_bytes(b"a photo")
    with pytest.raises(ZooError, match="--out's files .*photos: holds files the zoo did not write"):
        artifact.PredictRun(dir=mlp_run, card={}, out=tmp_path / "photos.csv").files_dir
    folder = artifact.PredictRun(dir=mlp_run, card={}, out=tmp_path / "masks.csv").files_dir
    assert folder == tmp_path / "masks" and (folder / ".zoo-written").is_file()
    (folder / "case1.png").write_bytes(b"a mask")
    assert artifact.PredictRun(dir=mlp_run, card={}, out=tmp_path / "masks.csv").files_dir == folder  # its own


def test_the_declared_torch_excludes_releases_with_the_weights_only_bypass():
    """GHSA-63cw-57p8-fm3p (CVE-2026-24747): torch.load(weights_only=True) could be bypassed before 2.10.0; the
    checkpoints, cards and prepared data the zoo reads rest on that loader."""
    import tomllib

    import torch
    from packaging.requirements import Requirement
    from packaging.version import Version

    from conftest import ROOT

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch_req,) = [Requirement(d) for d in deps if Requirement(d).name == "torch"]
    assert not any(torch_req.specifier.contains(v) for v in ("2.6.0", "2.9.1", "2.10.0a0"))
    assert torch_req.specifier.contains("2.10.0") and Version(torch.__version__.split("+")[0]) >= Version("2.10")


def test_artefacts_are_written_whole_fsynced_and_renamed(tmp_path, monkeypatch):
    """model.safetensors, predictions.csv, model.json, summary/config.json, test_items.json and the XGBoost boosters
    go through checkpoint.replaced: a write that fails half-way leaves the previous file and no temp file; a good
    one fsyncs the file and its folder before and after the rename."""
    import os

    import safetensors.torch
    import torch

    from recipe_zoo.core import artifact, checkpoint

    model = torch.nn.Linear(3, 2)
    path = tmp_path / "model.safetensors"
    checkpoint.export_safetensors(model, path)
    before = path.read_bytes()

    def half_then_fail(m, filename, metadata=None):
        Path(filename).write_bytes(before[:10])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_model", half_then_fail)
    with pytest.raises(OSError):
        checkpoint.export_safetensors(torch.nn.Linear(3, 2), path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
                        or real_fsync(fd))
    artifact.write_rows(tmp_path / "predictions.csv", [{"a": 1.5}])
    assert synced[0].startswith(".predictions.") and synced[1] == tmp_path.name  # the file, then its folder
    assert (tmp_path / "predictions.csv").read_text() == "a\n1.5\n"


def test_a_run_killed_by_sigkill_reads_as_killed_not_running(tmp_path):
    """The row records the run's pid and host; the next read of the index finds the process gone and says so (and
    records it). An index from before those columns gets them, its rows kept."""
    import signal
    import sqlite3
    import subprocess
    import sys

    from conftest import ROOT
    from recipe_zoo import results
    from test_reliability import wait_for_step

    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "recipe_zoo", "run", "tabular/mlp", "data=wine", "hidden=16",
                             "log_every=0", "--budget", "100000steps", "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_step(proc, 5)
        (row,) = results.all_rows(out / "index.sqlite")
        assert row["status"] == "running" and row["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (row,) = results.all_rows(out / "index.sqlite")
    assert row["status"] == "killed"
    with sqlite3.connect(out / "index.sqlite") as con:
        assert con.execute("SELECT status FROM runs").fetchone()[0] == "killed"  # recorded, not only shown
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as con:
        con.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT, started TEXT)")
        con.execute("INSERT INTO runs VALUES ('a', 'ok', '2026-12-01')")
    results.upsert(old, {"run_id": "b", "status": "running", "pid": 1, "host": "elsewhere"})
    assert sorted((r["run_id"], r["status"]) for r in results.all_rows(old)) == [("a", "ok"), ("b", "running")]


def test_a_second_resume_of_a_run_still_going_is_one_line(tmp_path):
    import signal
    import subprocess
    import sys

    from conftest import ROOT
    from test_reliability import wait_for_step

    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "recipe_zoo", "run", "tabular/mlp", "data=wine", "hidden=16",
                             "log_every=0", "checkpoint_every=1", "--budget", "100000steps", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_step(proc, 5, checkpoint_of=out)
        (run_dir,) = (out / "tabular" / "mlp").iterdir()
        refused(zoo_in_process("run", "--resume", run_dir), f"{run_dir}: another zoo process is writing this run now")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
