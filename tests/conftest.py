import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from child_output import stdout_lines  # noqa: F401  (a child's output with a deadline: tests take it from here)
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent

# GPUs are hidden from the tests (before anything initialises CUDA; subprocesses inherit it), so `--device auto` means
# the CPU here as on a machine without one. ZOO_TEST_GPU=1 shows them to the whole session: run it with `-m gpu`.
GPU_TESTS = os.environ.get("ZOO_TEST_GPU") == "1"
if not GPU_TESTS:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

# Each test process and the runs it starts use one thread. Under pytest-xdist (`make test` runs one worker per
# core) two workers of two threads each on two cores spend their time waiting on each other's threads, not
# computing. And a run in this process (`zoo_in_process`) must compute as a `zoo` process does, bit for bit: the
# OpenMP pool's size at torch's import picks some kernels (torch.set_num_threads(1) later does not undo it), so it
# is set here, before anything imports torch, with or without xdist.
os.environ["OMP_NUM_THREADS"] = "1"

# No deadline anywhere (a verdict must not depend on this machine's speed); under CI (`CI` set: .ci/run sets it) the
# examples are derandomised too, so a CI failure is the same failure on every rerun.
settings.register_profile("zoo", deadline=None)
settings.register_profile("ci", parent=settings.get_profile("zoo"), derandomize=True, database=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "zoo")


def pytest_collection_modifyitems(config, items):
    """The tests marked slow first (the long ones are among them): pytest-xdist hands each worker a share of the
    list in order and an idle worker steals from the end of another's, so the run ends on short tests, not with
    one worker alone in a minute-long one. A test marked gpu runs only with ZOO_TEST_GPU=1 and a GPU visible; it is
    skipped otherwise."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: file order within each part
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = None if GPU_TESTS else "GPUs are hidden from the tests: ZOO_TEST_GPU=1 shows them"
    if reason is None:
        import torch

        reason = None if torch.cuda.is_available() else "ZOO_TEST_GPU=1, but no GPU is visible"
    for item in gpu_items if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _shared_computed_cache(tmp_path_factory):
    """One ``$ZOO_CACHE`` for the session (core.flops.computed_cache_root): what is computed once and keyed by its
    inputs (the fid_zoo network, the CPU peak) is computed by the first test that needs it, not by each. Under
    pytest-xdist the workers share it too (their temp folders sit in one session folder); its writers rename
    finished files into place, so processes filling it at once at worst compute an entry twice. Tests of those
    caches take ``@pytest.mark.own_cache``: an empty one of their own."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    (root / "zoo-cache").mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ZOO_CACHE", str(root / "zoo-cache"))
        yield root / "zoo-cache"


@pytest.fixture(autouse=True)
def _isolated_env(request, tmp_path, monkeypatch):
    """Runs, the results index and caches go to a temp folder; nothing touches the network. The computed caches
    are the session's (``_shared_computed_cache``) unless the test is marked own_cache."""
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("ZOO_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ZOO_BOARD_DIR", str(tmp_path / "board"))  # never the committed leaderboard
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))  # the hub cache ESM weights are looked up in
    # no curves.png (0.2-0.4 s of matplotlib a run, most of a tiny run's time): test_cli's smoke run draws one
    monkeypatch.setenv("ZOO_PLOTS", "0")
    if request.node.get_closest_marker("own_cache"):
        monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "zoo-cache"))


SIGNALS = (signal.SIGINT, signal.SIGTERM)  # the loop's Ctrl-C and SIGTERM handlers (core.loop) must not outlive it


def global_state() -> dict:
    """torch's global switches (core.precision.global_switches) and the SIGINT/SIGTERM handlers, by name."""
    from recipe_zoo.core import precision

    return {**precision.global_switches(), **{signal.Signals(s).name: signal.getsignal(s) for s in SIGNALS}}


def restore_global_state(saved: dict) -> list[str]:
    """Put ``saved`` (from global_state) back; returns what had changed, as ``name: before -> now``."""
    from recipe_zoo.core import precision

    now = global_state()
    changed = [f"{k}: {saved[k]!r} -> {now[k]!r}" for k in saved if now[k] != saved[k]]
    precision.set_global_switches(saved)
    for s in SIGNALS:
        signal.signal(s, saved[signal.Signals(s).name])
    return changed


@pytest.fixture(scope="session", autouse=True)
def _session_torch_state():
    """torch's state as the session found it, the global generators seeded: every test starts from it."""
    import random

    import numpy as np

    from recipe_zoo.core import precision

    random.seed(0)  # a test drawing unseeded gets the same draws in any order and in any session
    np.random.seed(0)
    return global_state(), precision.rng_states()


@pytest.fixture(autouse=True)
def _torch_left_as_found(_session_torch_state):
    """A test (its in-process runs, its fixtures) must leave torch's switches as it found them: the zoo's entry
    point (``recipe_zoo.cli.main``) restores what a run sets, and a test that calls a recipe's training function
    directly wraps it in ``core.precision.torch_state_kept()``. Otherwise the test fails naming what changed, and the
    switches are put back for the next test. The generators are put back silently: drawing from them is no fault."""
    from recipe_zoo.core import precision

    switches, rngs = _session_torch_state
    yield
    precision.set_rng_states(rngs)
    changed = restore_global_state(switches)
    if changed:
        pytest.fail("the test left torch's global state changed (now restored): " + "; ".join(changed), pytrace=False)


@pytest.fixture(autouse=True)
def _registry_restored():
    """A test that runs a recipe file of its own in-process (``main(["run", FILE])``) registers it: afterwards the
    registry is as it was, so a later test's ``registry.load_all()`` sees only the zoo's recipes, in any order."""
    from recipe_zoo.core import api

    before = dict(api.REGISTRY)
    yield
    for name, spec in list(api.REGISTRY.items()):
        if name in before:
            api.REGISTRY[name] = before[name]
        elif not spec.train.__module__.startswith("recipe_zoo.recipes."):
            del api.REGISTRY[name]


def zoo(*args, cwd=None, env=None, timeout=300):
    """Run the real ``zoo`` command in a subprocess; returns the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "recipe_zoo", *map(str, args)], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def git_repo(path: Path, files: dict[str, str]):
    """A git checkout at ``path`` with ``files`` (name: text) committed; returns ``git(*args)`` run inside it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, text=True)

    git("init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return git


def zoo_in_process(*args) -> subprocess.CompletedProcess:
    """``zoo ARGS`` in this process, as ``zoo`` would answer it (exit status, stdout, stderr) without the seconds a
    new process spends importing torch: for tables of bad input, and for runs and resumes, which compute as a ``zoo``
    process does (one torch thread, one OpenMP thread from the start: set above, before torch loads); ``main``
    restores the torch switches a run sets. The real command's exit codes are the same function's (``python -m
    recipe_zoo`` exits with ``main()``'s code), tested through ``zoo``."""
    import contextlib
    import io

    import torch

    from recipe_zoo.cli import main

    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(map(str, args)))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(["zoo", *map(str, args)], code, out.getvalue(), err.getvalue())


def run_ok(*args, budget: str):
    """``zoo run ARGS --budget BUDGET`` that must succeed, in this process (as ``zoo`` computes: one OpenMP thread
    from the start; its speed switches restored after): (its summary block, the output). Where the run kept its
    per-item test scores, they give its test metric again."""
    r = zoo_in_process("run", *args, "--budget", budget)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = summary_block(r.stdout)
    check_items(Path(summary["run_dir"]))
    return summary, r


def check_items(run_dir: Path) -> None:
    """The run's ``test_items.json`` (what a paired rank compares) computes its test metric on all its items: that
    of the run itself (to float32's precision, where a recipe counts in it), or with folds (each fold's metric,
    then their mean) within the folds' spread; and its ``split.csv`` names the items (a digest to pair by)."""
    import numpy as np

    from recipe_zoo import paired
    from recipe_zoo.core import items

    scores, summary = items.load(run_dir), json.loads((run_dir / "summary.json").read_text())
    if scores is None:
        return
    assert paired.split_digest(run_dir), run_dir  # the items it scored are named: paired ranks can pair the run
    value, spread = scores.statistic(np.arange(len(scores))), summary["metrics"].get(summary["metric"] + "_std")
    assert value == pytest.approx(summary["value"], rel=1e-6, abs=3 * spread if spread else 0), run_dir


def run_bad(*args, budget: str) -> str:
    """``zoo run`` on bad input (in-process): exit 2, no traceback; returns the one-line message."""
    r = zoo_in_process("run", *args, "--budget", budget)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return r.stderr.strip().splitlines()[-1]


def write_file(path: Path, content: str | bytes | None) -> Path:
    """A test file: text, raw bytes (a bad encoding, say), or nothing at all (None: the file is missing)."""
    if isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        path.write_bytes(content)
    return path


def bad_input(capfd, args: list, out: Path, *needles: str, budget: str = "3steps") -> str:
    """``zoo run ARGS`` in-process on bad input: exit 2, one line on stderr naming ``needles``, no traceback,
    and no ``ok`` row in the results index. Returns the line. (In-process: a table of cases costs no imports.)"""
    from recipe_zoo import results

    capfd.readouterr()
    r = zoo_in_process("run", *args, "--budget", budget, "--out", out)
    err = r.stderr + capfd.readouterr().err  # Python's writes to stderr, and any straight to its file descriptor
    lines = [line for line in err.splitlines() if line.strip()]
    assert r.returncode == 2, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("zoo: error: "), err[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    index = out / "index.sqlite"
    if index.exists():
        assert all(r["status"] != "ok" for r in results.all_rows(index))
    return lines[0]


def run_doctor(name: str, args: list, out: Path) -> tuple[int, list[dict]]:
    """``zoo doctor`` in-process: (exit code, the findings) of its one report under out/doctor/NAME/."""
    import json

    import torch

    from recipe_zoo.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: on a busy machine a second thread mostly waits (a test took 77 s, not 7)
    try:
        code = main(["doctor", name, *map(str, args), "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    (folder,) = (out / "doctor" / name).iterdir()
    assert (folder / "report.md").is_file()
    return code, json.loads((folder / "findings.json").read_text())


def summary_block(stdout: str) -> dict:
    """The key: value lines after the final ``---``."""
    block = stdout.rsplit("---\n", 1)[1]
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in block.strip().splitlines())}


def make_tiny_llama(path: Path) -> Path:
    """A 2-layer random Llama with a 300-token BPE tokenizer, saved with ``save_pretrained``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from recipe_zoo.recipes.llm import tokenization as llm

    text = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\n" * 20
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=llm.train_bpe([text], 300), bos_token=llm.BOS,
                                        eos_token=llm.BOS, pad_token=llm.BOS)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_tiny_esm(path: Path, layers: int = 2, width: int = 32, heads: int = 4, seed: int = 0) -> Path:
    """A random ESM-2 saved in fair-esm's checkpoint layout ({'cfg': {'model': Namespace}, 'model': state}
    with the 'encoder.sentence_encoder.' prefixes), the file users download or keep locally."""
    import argparse

    import esm
    import torch

    torch.manual_seed(seed)
    model = esm.model.esm2.ESM2(num_layers=layers, embed_dim=width, attention_heads=heads, alphabet="ESM-1b")
    cfg = argparse.Namespace(encoder_layers=layers, encoder_embed_dim=width, encoder_attention_heads=heads,
                             token_dropout=True)
    state = {f"encoder.sentence_encoder.{k}": v for k, v in model.state_dict().items()
             if not k.startswith("contact_head.regression")}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"cfg": {"model": cfg}, "model": state}, path)
    return path


@pytest.fixture
def tiny_esm(tmp_path) -> Path:
    """A tiny random ESM-2 (2 layers, width 32) as a local fair-esm file: the protein tests' weights."""
    return make_tiny_esm(tmp_path / "weights" / "esm2_t2_tiny.pt")


def small_run_args(name: str, tmp_path) -> list[str]:
    """Overrides that make each recipe a few-second run on tiny local data (a domain's list, each recipe taking
    the fields its config has)."""
    import dataclasses

    from recipe_zoo import registry

    fields = {f.name for f in dataclasses.fields(registry.get(name).config)}
    return [a for a in _domain_run_args(name, tmp_path) if a.split("=")[0] in fields]


def _domain_run_args(name: str, tmp_path) -> list[str]:
    if name.startswith("vision/"):
        if name != "vision/finetune":
            return ["width=8"]
        import timm
        from safetensors.torch import save_file

        save_file(timm.create_model("test_resnet").state_dict(), str(tmp_path / "w.safetensors"))
        return ["width=8", "model=test_resnet", f"weights={tmp_path / 'w.safetensors'}", "image_size=16"]
    if name.startswith("llm/"):
        text = tmp_path / "corpus.txt"
        text.write_text("To be, or not to be, that is the question.\n" * 200)
        common = [f"data={text}", "seq_len=32", "micro_batch=4", "eval_bytes=800"]
        if name == "llm/lora":
            return common + [f"model={make_tiny_llama(tmp_path / 'llama')}"]
        return common + ["depth=1", "aspect=32", "head_dim=16", "batch_tokens=128", "vocab_size=300", "samples=0",
                         "compile=false"]
    if name.startswith("molecules/"):
        data = tmp_path / "mols.csv"
        data.write_text("smiles,y\n" + "".join(f"{'C' * n}O,{n}\n" for n in range(1, 30)))
        return [f"data={data}", "target=y", "hidden=16", "ffn_hidden=16", "n_estimators=20", "bits=64"]
    if name.startswith("tabular/"):
        return ["data=wine", "bagging=1", "hidden=16"]
    if name.startswith("protein/"):
        weights = make_tiny_esm(tmp_path / "esm2_tiny.pt")
        if name == "protein/esm-zeroshot":
            data = tmp_path / "muts.csv"
            data.write_text("mutant,y\nM1A,0.1\nK2A,0.5\nT3W,0.2\nM1C:K2D,0.9\n")
            return [f"data={data}", "target=y", "wt=MKTAYIAKQR", f"esm_weights={weights}"]
        data = tmp_path / "prot.fasta"
        data.write_text("".join(f">v{i}|{i % 7 / 7:.3f}\nMKT{'AGLV'[i % 4]}YIA{'KRDE'[i // 4 % 4]}QR\n" for i in range(40)))
        return [f"data={data}", f"esm_weights={weights}", "hidden=16", "batch_size=8"]
    if name.startswith("medical/"):
        return ["width=8", "levels=3", "tta=false", "compile=false",
                "patch=64,64" if name == "medical/swinunetr" else "patch=32,32"]
    if name.startswith("diffusion/"):
        return ["width=8", "n_samples=20", "n_real=20", "sample_steps=2", "grid=4"]
    if name.startswith("contrastive/"):
        return ["width=8", "proj_hidden=32"]
    raise AssertionError(f"add tiny-run overrides for {name}")


def without_timing(rows: list[dict]) -> list[dict]:
    """Evaluation rows without their wall-clock field: what two runs of the same work must share exactly."""
    return [{k: v for k, v in r.items() if k != "train_seconds"} for r in rows]


def garble_digits_test(monkeypatch) -> None:
    """From now on, digits' test images and labels are noise (train and validation untouched)."""
    import torch

    from recipe_zoo.recipes import images

    split = images.fixed_test_split

    def garbage(x, y, classes, name, val_fraction=0.1):
        splits = split(x, y, classes, name, val_fraction)
        if name == "digits":
            g = torch.Generator().manual_seed(1)
            splits.test_x = torch.randint(0, 256, splits.test_x.shape, generator=g).to(torch.uint8)
            splits.test_y = torch.randint(0, 10, splits.test_y.shape, generator=g)
        return splits

    monkeypatch.setattr(images, "fixed_test_split", garbage)


def roundtrip(run_dir: Path, tol: float = 1e-6, recipe_file=None, **options):
    """``recipe_zoo.load(RUN_DIR).predict()`` on the run's own test split: every metric the run reported that
    predict recomputes agrees within ``tol``, and the rows equal the run's ``predictions.csv``. Returns the
    Predictions. ``recipe_file``: the file a run of a user's recipe was trained from."""
    import csv
    import json
    import math

    from recipe_zoo import load

    result = load(run_dir, device="cpu", recipe_file=recipe_file).predict(**options)
    reported = json.loads((run_dir / "summary.json").read_text())["metrics"]
    shared = [k for k in result.metrics if k in reported]
    assert shared, (sorted(result.metrics), sorted(reported))
    for key in shared:
        assert math.isclose(result.metrics[key], reported[key], rel_tol=0, abs_tol=tol), \
            (key, result.metrics[key], reported[key])
    saved = list(csv.DictReader(open(run_dir / "predictions.csv")))
    assert len(saved) == len(result.rows)
    for mine, theirs in zip(result.rows, saved):
        for key, value in mine.items():
            if isinstance(value, float):
                assert math.isclose(value, float(theirs[key]), rel_tol=0, abs_tol=tol), (key, value, theirs[key])
            else:
                assert str(value if value is not None else "") == theirs[key], (key, value, theirs[key])
    return result


def predict_bad(capfd, run_dir: Path, *args: str, needles: tuple[str, ...] = ()) -> str:
    """``zoo predict RUN_DIR ARGS`` in-process on bad input: exit 2 and one line naming ``needles``."""
    from recipe_zoo.cli import main

    capfd.readouterr()
    code = main(["predict", str(run_dir), *args, "--device", "cpu"])
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and line.startswith("zoo: error: ")]
    assert code == 2, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert len(lines) == 1, err[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def train_in_process(out: Path, recipe: str, *args, budget: str, cache: Path | None = None) -> Path:
    """``zoo run RECIPE ARGS --budget B`` in this process on the CPU, one thread, runs under ``out/runs``: the run
    directory. Caches, data and board folders go under ``out`` (``cache``: a cache shared between modules), as a
    module-scoped fixture's run outlives each test's environment."""
    import torch

    from recipe_zoo.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as env:
            for key, folder in (("XDG_CACHE_HOME", cache or out / "cache"), ("ZOO_DATA", out / "data"),
                                ("ZOO_BOARD_DIR", out / "board")):
                env.setenv(key, str(folder))
            code = main(["run", recipe, *map(str, args), "--budget", budget, "--out", str(out / "runs"),
                         "--device", "cpu"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0, run_log_tail(out / "runs" / recipe)
    (run_dir,) = (out / "runs" / recipe).iterdir()
    return run_dir


def run_log_tail(folder: Path, chars: int = 3000) -> str:
    """The end of every log under ``folder`` (a failed run's own account of why: its log.txt, a Dask cluster's
    workers' log), for an assertion's message."""
    logs = sorted(p for p in folder.rglob("*") if p.name == "log.txt" or p.suffix == ".log") if folder.is_dir() else []
    return "\n".join(f"{log}:\n{log.read_text(errors='replace')[-chars:]}" for log in logs) or f"no logs under {folder}"
