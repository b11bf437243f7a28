"""The test suite's own isolation: torch's global state kept by the zoo's entry point and checked after every test
(conftest's _torch_left_as_found), child output read with a deadline (conftest.stdout_lines), GPUs hidden unless
asked for, the computed caches shared by the session, hypothesis without deadlines."""
import json
import os
import random
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

import conftest
from recipe_zoo.core import flops, precision


def _same_generators(a: dict, b: dict) -> bool:
    return (a["random"] == b["random"] and torch.equal(a["torch"], b["torch"])
            and all(np.array_equal(x, y) for x, y in zip(a["numpy"], b["numpy"])))


def _what_a_run_sets() -> None:
    """Every process-wide setting a run makes: the recipes' speed switches (CPU and CUDA), compile's fallback, the
    seeds; and the rest of what global_switches watches."""
    precision.speed_switches(torch.device("cpu"), deterministic=True)
    precision.speed_switches(torch.device("cuda"))  # only flags here: no CUDA is touched
    precision.maybe_compile(torch.nn.Linear(2, 2), True)  # wraps; compiles at a first call that never comes
    precision.seed_everything(3)
    torch.set_num_threads(torch.get_num_threads() + 1)
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.set_autocast_enabled("cpu", True)


def test_torch_state_kept_puts_back_each_switch_a_run_sets_and_the_generators():
    before, rngs = precision.global_switches(), precision.rng_states()
    with precision.torch_state_kept():
        _what_a_run_sets()
        inside = precision.global_switches()
        assert not _same_generators(precision.rng_states(), rngs)
    changed = {k for k in before if inside[k] != before[k]}
    expected = {"float32_matmul_precision", "deterministic_algorithms", "cudnn.benchmark", "dynamo.suppress_errors",
                "num_threads", "default_dtype", "grad_enabled", "autocast.cpu"}
    if torch.set_flush_denormal(False):  # False where the CPU cannot flush denormals (then nothing changed)
        expected.add("flush_denormal")
    assert changed == expected, changed ^ expected
    assert precision.global_switches() == before
    assert _same_generators(precision.rng_states(), rngs)


def test_main_called_from_python_gives_torch_back_as_it_found_it(monkeypatch, capsys):
    from recipe_zoo import cli

    def a_run(args):
        _what_a_run_sets()
        return 0

    monkeypatch.setitem(cli.COMMANDS, "list", a_run)
    before, rngs = precision.global_switches(), precision.rng_states()
    assert cli.main(["list"]) == 0
    assert precision.global_switches() == before
    assert _same_generators(precision.rng_states(), rngs)


@pytest.mark.slow
def test_a_real_run_in_process_leaves_torch_as_it_found_it(tmp_path):
    """vision/resnet sets TF32 matmuls and flushes denormals (speed_switches) and seeds everything: two steps of it
    through zoo's own entry point, then torch is as before. (Slow: 7 s; in the fast set every in-process run is
    checked by conftest's _torch_left_as_found.)"""
    before, rngs = precision.global_switches(), precision.rng_states()
    r = conftest.zoo_in_process("run", "vision/resnet", "width=8", "--budget", "2steps",
                                "--device", "cpu", "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr[-2000:]
    assert precision.global_switches() == before
    assert _same_generators(precision.rng_states(), rngs)


def test_what_a_test_leaves_changed_is_named_and_put_back():
    """The check conftest runs after each test: the names of what changed, before -> after, then all restored."""
    saved = conftest.global_state()
    torch.set_float32_matmul_precision("medium")
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    old_term = signal.signal(signal.SIGTERM, lambda *_: None)
    changed = conftest.restore_global_state(saved)
    assert [c.split(":")[0] for c in changed] == ["float32_matmul_precision", "cudnn.benchmark", "SIGTERM"], changed
    assert changed[0].endswith(" -> 'medium'")
    assert conftest.global_state() == saved and signal.getsignal(signal.SIGTERM) is old_term
    assert conftest.restore_global_state(saved) == []


def test_each_test_starts_from_the_sessions_generators(_session_torch_state):
    """The fixture puts the session's generators back after every test: a test drawing unseeded draws the same
    numbers in any order (this one draws, the next test starts where the session did)."""
    _, rngs = _session_torch_state
    assert _same_generators(precision.rng_states(), rngs)
    for draw in (random.random, np.random.rand, torch.seed):  # moved on: the fixture puts them back
        draw()


def _child(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **kwargs)


def test_stdout_lines_gives_every_line_and_continues_where_it_stopped():
    proc = _child("for i in range(5): print(f'line {i}', flush=True)")
    for line in conftest.stdout_lines(proc, timeout=120):
        if line == "line 1\n":
            break
    assert "".join(conftest.stdout_lines(proc, timeout=120)) == "line 2\nline 3\nline 4\n"
    assert list(conftest.stdout_lines(proc, timeout=120)) == []  # the end stays the end
    assert proc.wait(timeout=60) == 0


@pytest.mark.parametrize("own_session", [False, True])
def test_stdout_lines_kills_a_child_whose_output_does_not_end_and_fails_with_its_last_lines(own_session):
    """A child that prints, then hangs: the wait for its next line ends at the deadline (0.5 s; the child would
    sleep 10 minutes), killing it (its process group when it leads one, as a torchrun launcher does)."""
    proc = _child("import time; print('ready', flush=True); time.sleep(600)", start_new_session=own_session)
    assert next(conftest.stdout_lines(proc, timeout=120)) == "ready\n"  # however slow the child's start
    with pytest.raises(pytest.fail.Exception, match=r"did not end within 0.5 s; killed. Last lines:\nready"):
        list(conftest.stdout_lines(proc, timeout=0.5))
    assert proc.returncode == -signal.SIGKILL


def test_gpus_are_hidden_from_tests_unless_the_session_asks():
    if conftest.GPU_TESTS:
        pytest.skip("ZOO_TEST_GPU=1: this session sees the GPUs")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and not torch.cuda.is_available()
    assert precision.choose_device("auto").type != "cuda"


@pytest.mark.gpu
def test_a_gpu_test_sees_the_gpu():
    assert torch.cuda.is_available() and precision.choose_device("auto").type == "cuda"
    assert torch.ones(2, device="cuda").sum().item() == 2


def test_the_computed_caches_are_the_sessions(_shared_computed_cache, tmp_path):
    from recipe_zoo.recipes.diffusion.models import fid_cache_dir

    assert flops.computed_cache_root() == _shared_computed_cache and tmp_path not in _shared_computed_cache.parents
    assert fid_cache_dir().parent.parent == _shared_computed_cache


@pytest.mark.own_cache
def test_a_test_of_those_caches_gets_an_empty_one_of_its_own(_shared_computed_cache, tmp_path):
    from recipe_zoo.recipes.diffusion.models import fid_cache_dir

    root = flops.computed_cache_root()
    assert root != _shared_computed_cache and tmp_path in root.parents
    assert not fid_cache_dir().exists() and not (root / "cpu_peak.json").exists()


@pytest.mark.slow
def test_two_processes_filling_the_cpu_peak_cache_at_once_both_succeed(tmp_path):
    """Each writes a whole table to a file of its own, then renames it into place: a reader never sees half a
    file, and neither writer fails (at worst both measure)."""
    code = "from recipe_zoo.core import flops; print(flops.cpu_peak_flops())"
    env = {**os.environ, "ZOO_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    peaks = [float("".join(conftest.stdout_lines(p, timeout=300))) for p in procs]
    assert [p.wait(timeout=60) for p in procs] == [0, 0] and min(peaks) > 0
    table = json.loads((tmp_path / "cpu_peak.json").read_text())
    assert len(table) == 1 and list(table.values())[0] in peaks
    assert [p.name for p in tmp_path.iterdir()] == ["cpu_peak.json"]  # no temp file left behind


def test_hypothesis_has_no_deadline_and_is_derandomised_under_ci():
    from hypothesis import settings

    assert settings.default.deadline is None
    assert settings.default.derandomize == bool(os.environ.get("CI"))
