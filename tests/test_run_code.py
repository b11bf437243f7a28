"""A run folder runs no code: predict, export, resume and recipe_zoo.load of a run trained from a user's recipe
file import the file the user names (checked against the sha256 its config.json recorded), never one the folder
names; compare imports nothing; a damaged config.json, card, weights file or summary is one line."""
import json
import shutil
from pathlib import Path

import pytest

from conftest import summary_block, zoo_in_process
from test_owned import refused


@pytest.fixture(scope="module")
def file_run(tmp_path_factory):
    """A run of `zoo new mytask --from tabular/mlp`'s file, kept elsewhere: (the file, the run folder)."""
    import sys

    from recipe_zoo import registry, templates
    from recipe_zoo.core import api

    tmp = tmp_path_factory.mktemp("file_run")
    path = templates.write_template(registry.get("tabular/mlp"), "mytask", tmp / "mytask.py", "test")[0]
    folders = list(sys.path)
    try:
        r = zoo_in_process("run", path, "data=wine", "hidden=16", "--budget", "4steps", "--out", tmp / "runs")
    finally:  # set up before conftest's per-test registry guard: "mytask" must not outlive this module's tests
        api.REGISTRY.pop("mytask", None)
        sys.path[:] = folders
    assert r.returncode == 0, r.stderr[-2000:]
    return path, Path(summary_block(r.stdout)["run_dir"])


def _copy(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def test_the_run_records_its_files_sha256(file_run):
    import hashlib

    path, run = file_run
    saved = json.loads((run / "config.json").read_text())
    assert saved["recipe_file"] == str(path) and saved["recipe_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("command", ["predict", "export", "resume"])
def test_a_run_of_a_recipe_file_needs_the_file_named(file_run, tmp_path, command):
    path, run = file_run
    argv = {"predict": ["predict", run, "--out", tmp_path / "p.csv"],
            "export": ["export", run, "--format", "safetensors", "--out", tmp_path / "x"],
            "resume": ["run", "--resume", run]}[command]
    refused(zoo_in_process(*argv), str(run), "runs no code of its own", "--from FILE.py" if command != "resume"
            else "zoo run FILE.py --resume")
    named = {"predict": ["predict", run, "--from", path, "--out", tmp_path / "p.csv"],
             "export": ["export", run, "--from", path, "--format", "safetensors", "--out", tmp_path / "x"],
             "resume": ["run", path, "--resume", run]}[command]
    r = zoo_in_process(*named)
    assert r.returncode == 0, r.stderr[-2000:]


def test_load_needs_the_file_too(file_run):
    from recipe_zoo import load
    from recipe_zoo.core.errors import ZooError

    path, run = file_run
    with pytest.raises(ZooError, match="runs no code of its own"):
        load(run, device="cpu")
    assert load(run, device="cpu", recipe_file=path).spec.name == "mytask"


def test_a_file_not_the_one_trained_from_is_refused_before_it_is_imported(file_run, tmp_path):
    path, run = file_run
    marker = tmp_path / "imported"
    edited = tmp_path / "mytask.py"
    edited.write_text(f"open({str(marker)!r}, 'w').close()\n" + path.read_text())
    refused(zoo_in_process("predict", run, "--from", edited, "--out", tmp_path / "p.csv"), str(edited),
            f"not the file {run} was trained from", "sha256")
    refused(zoo_in_process("predict", run, "--from", tmp_path / "absent.py"), "absent.py: recipe file not found")
    assert not marker.exists()


def test_the_folder_s_own_recipe_file_is_never_imported(file_run, tmp_path):
    """A shared run folder whose config.json names a file of its own (with code that runs on import): predict and
    export refuse it in one line, compare reads the run without it; the code never runs."""
    _, original = file_run
    run = _copy(original, tmp_path)
    marker = tmp_path / "imported"
    evil = run / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').close()\n")
    saved = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**saved, "recipe_file": str(evil), "recipe_sha256": ""}))
    refused(zoo_in_process("predict", run, "--out", tmp_path / "p.csv"), "runs no code of its own")
    refused(zoo_in_process("export", run, "--format", "safetensors", "--out", tmp_path / "x"), "runs no code")
    r = zoo_in_process("compare", run, original)
    assert r.returncode == 0 and "mytask" in r.stdout, r.stderr[-2000:]
    assert not marker.exists()


def test_a_zoo_recipe_s_run_takes_no_recipe_file(file_run, tmp_path):
    from conftest import ROOT

    out = tmp_path / "runs"
    r = zoo_in_process("run", "tabular/mlp", "data=wine", "hidden=16", "--budget", "2steps", "--out", out)
    assert r.returncode == 0, r.stderr[-2000:]
    run = Path(summary_block(r.stdout)["run_dir"])
    refused(zoo_in_process("predict", run, "--from", ROOT / "recipes" / "tabular" / "mlp.py"),
            "trained with the zoo's own tabular/mlp", "drop the recipe file")


@pytest.mark.parametrize("damage", ["config-text", "config-list", "config-keys", "weights-cut", "weights-shape",
                                    "card-text"])
def test_a_damaged_run_folder_is_one_line_to_predict(file_run, tmp_path, damage):
    import safetensors.torch
    import torch

    path, original = file_run
    run = _copy(original, tmp_path)
    if damage == "config-text":
        (run / "config.json").write_text('{"recipe": "mytask", "con')
    elif damage == "config-list":
        (run / "config.json").write_text("[1, 2]")
    elif damage == "config-keys":
        (run / "config.json").write_text('{"recipe": "mytask"}')
    elif damage == "weights-cut":
        (run / "model.safetensors").write_bytes((run / "model.safetensors").read_bytes()[:100])
    elif damage == "weights-shape":
        state = safetensors.torch.load_file(run / "model.safetensors")
        safetensors.torch.save_file({k: torch.zeros(*v.shape[:-1], v.shape[-1] + 1) if v.ndim else v
                                     for k, v in state.items()}, run / "model.safetensors")
    else:
        (run / "model.json").write_text("{not json")
    where = {"config-text": "config.json", "config-list": "config.json", "config-keys": "config.json",
             "weights-cut": "model.safetensors", "weights-shape": "model.safetensors", "card-text": "model.json"}
    r = zoo_in_process("predict", run, "--from", path, "--out", tmp_path / "p.csv")
    refused(r, where[damage])
    assert "Traceback" not in r.stderr and not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize("damage", ["no-env", "env-without-hardware", "summary-keys", "summary-text"])
def test_compare_of_a_damaged_run_is_one_line(file_run, tmp_path, damage):
    _, original = file_run
    run = _copy(original, tmp_path)
    if damage == "no-env":
        (run / "env.json").unlink()
    elif damage == "env-without-hardware":
        (run / "env.json").write_text("{}")
    elif damage == "summary-keys":
        (run / "summary.json").write_text('{"status": "ok"}')
    else:
        (run / "summary.json").write_text('{"status": "o')
    where = "env.json" if "env" in damage else "summary.json"
    refused(zoo_in_process("compare", run, original), where)


def test_names_in_a_prepared_manifest_stay_inside_its_folder(tmp_path):
    text = tmp_path / "notes"
    text.mkdir()
    (text / "a.txt").write_text("First Citizen: speak, speak. " * 400)
    out = tmp_path / "prepared"
    assert zoo_in_process("data", "prepare", "llm/gpt", f"data={text}", "tokenizer=bytes", "--out", out).returncode == 0
    manifest = json.loads((out / "prepared.json").read_text())
    files = manifest["files"]
    name = next(iter(files)) if isinstance(files, dict) else files[0]
    (tmp_path / "outside.bin").write_bytes(b"x" * 64)
    bad = {**files, "../outside.bin": files[name]} if isinstance(files, dict) else [*files, "../outside.bin"]
    (out / "prepared.json").write_text(json.dumps({**manifest, "files": bad}))
    r = zoo_in_process("run", "llm/gpt", f"data={out}", "tokenizer=bytes", "--budget", "2steps",
                       "--out", tmp_path / "runs")
    refused(r, "prepared.json", "'../outside.bin'")


def test_show_of_a_recipe_file_says_how_to_name_it(file_run):
    path, _ = file_run
    r = zoo_in_process("show", path)
    assert r.returncode == 0 and f"zoo predict RUN_DIR --from {path} " in r.stdout, r.stderr[-2000:]
    assert f"zoo export RUN_DIR --from {path} --format" in r.stdout
    assert "--from" not in zoo_in_process("show", "tabular/mlp").stdout.split("predict:")[1].split("\n")[0]
