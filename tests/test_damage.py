"""Nothing lost when a file is damaged: a cut-off or garbled line in the board's JSONL files, a damaged results
index, and ``zoo bench`` / ``zoo verify`` killed mid-run or run two at once on one board.

Every fault is injected on purpose and each test checks the exit code, the one line that names the fault, and that
no row present before the fault is lost."""
import errno
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, summary_block, zoo_in_process
from recipe_zoo import board, board_render, results
from recipe_zoo.core.errors import ResourceError
from test_board import row

XGB = ["tabular/xgb", "data=wine", "bagging=1", "n_estimators=20", "--budget", "2steps"]
RESNET = ["vision/resnet", "width=8", "data=digits", "eval_every=0", "--budget", "4steps"]


def line_of(r: dict) -> bytes:
    return (json.dumps(r, sort_keys=True) + "\n").encode()


def cut(r: dict) -> bytes:
    """The first half of a row's line: what a writer killed mid-row, or stopped by a full disk, leaves."""
    whole = line_of(r)
    return whole[:len(whole) // 2]


GOOD = [row("a", 0.70), row("b", 0.80)]
LATER = row("c", 0.75)
# name: (the damaged file's bytes after the two good rows, the damaged lines' numbers, words in their warning)
DAMAGE = {
    "cut_last_line": (cut(LATER), [3], "cut off mid-line"),
    "cut_line_then_a_row": (cut(LATER) + b"\n" + line_of(LATER), [3], "cut off mid-line"),
    "merge_conflict": (b"<<<<<<< HEAD\n" + line_of(LATER) + b"=======\n" + line_of(row("d", 0.6)) + b">>>>>>> x\n",
                       [3, 5, 7], "merge conflict marker"),
    "nul_tail": (b"\0" * 64, [3], "NUL bytes"),
    "not_utf8": (b"\xff\xfe" + line_of(LATER), [3], "not UTF-8"),
    "not_an_object": (b"[1, 2]\n", [3], "not a JSON object"),
    "no_mean": (line_of({k: v for k, v in LATER.items() if k != "mean"}), [3], "without 'mean'"),
    "mean_is_text": (line_of({**LATER, "mean": "0.75"}), [3], "'mean' is '0.75', not a number"),
}


def readable(damage: str) -> list[dict]:
    """The rows a reader keeps from the damaged file: the good rows, and the whole rows among the damage."""
    return GOOD + {"cut_line_then_a_row": [LATER], "merge_conflict": [LATER, row("d", 0.6)]}.get(damage, [])


def zoo_lines(stderr: str) -> list[str]:
    """The zoo's own lines on stderr (a library may add warnings of its own)."""
    return [line for line in stderr.splitlines() if line.startswith("zoo: ")]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_line_is_skipped_with_one_warning_and_the_rest_read(damage):
    path = board.rows_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(map(line_of, GOOD)) + DAMAGE[damage][0])
    shown = zoo_in_process("board")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == board_render.render(readable(damage), [], [])
    warnings = zoo_lines(shown.stderr)
    assert [w.split(": ")[2] for w in warnings] == [f"{path}:{n}" for n in DAMAGE[damage][1]], warnings
    assert all(DAMAGE[damage][2] in w and w.endswith("skipped, the other rows are read") for w in warnings)
    assert "Traceback" not in shown.stderr


def test_every_prefix_of_a_row_reads_as_cut_off():
    """However far a stopped writer got, the line is named for what it is (nested objects end in braces too)."""
    whole = line_of(row("a", 0.7, overrides={"width": "8"}, inputs={"data": {"sha256": "ab"}}, values=[0.1, None]))
    for end in range(1, len(whole) - 1):
        rows, damaged = board.parse_rows(whole[:end], Path("results.jsonl"))
        assert not rows and len(damaged) == 1 and "cut off mid-line" in damaged[0], whole[:end]


@pytest.mark.parametrize("kind", board.KINDS)
def test_rewriting_the_board_refuses_to_drop_a_damaged_row(kind):
    """`zoo board --write` (and `--plot`, whose charts draw the result rows) would render without the line: they
    refuse, naming it, and change nothing."""
    board.append_rows(GOOD)
    board.append_rows([{"benchmark": "cifar10-subset", "metric": "accuracy", "model": "m", "value": "9%",
                        "source": "s"}], board.reported_file())
    board.append_rows([{"row": board.row_id(GOOD[0]), "passed": True, "date": "2026-12-01", "n": 1, "mean": 0.7}],
                      board.checks_file())
    board.append_rows([{"benchmark": "cifar10-subset", "budget": "300steps", "hardware": "h", "recipe": "r",
                        "train_seconds": 10.0, "n": 1}], board.speed_file())
    board.append_rows([{"commit": "abc123456", "committed": 1, "hardware": "h", "recipes": {"r": {"case": "d1"}}}],
                      board.fingerprints_file())
    board.append_rows([{"id": "0123456789abcdef", "seeds": []}], board.items_file())
    board.append_rows([{"recipe": "r", "source": ["data=a"], "source_budget": "1m", "benchmark": "b", "metric": "m",
                        "higher_is_better": True, "budget": "30s", "total_budget": "90s", "hardware": "h", "n": 1,
                        "arms": {}}], board.transfer_file())
    assert zoo_in_process("board", "--write", "--plot").returncode == 0
    damaged = board.board_dir() / "benchmarks" / kind
    with open(damaged, "ab") as f:
        f.write(cut(LATER))
    number = damaged.read_bytes().count(b"\n") + 1
    before = {p: p.read_bytes() for p in board.board_dir().rglob("*") if p.is_file()}
    for args in [["--write"]] + [["--plot"]] * (kind == "results.jsonl"):
        refused = zoo_in_process("board", *args)
        assert refused.returncode == 2, refused.stderr
        assert zoo_lines(refused.stderr) == [f"zoo: error: {damaged}:{number}: a row cut off mid-line (a writer was "
                                             "stopped: killed, or the disk full); not rendering the board without that "
                                             "row: repair or delete the line, then run again"]
        assert {p: p.read_bytes() for p in board.board_dir().rglob("*") if p.is_file()} == before  # charts too
    damaged.write_bytes(before[damaged][:before[damaged].rindex(b"\n") + 1])  # the line deleted, as the line says
    assert zoo_in_process("board", "--write").returncode == 0


def test_an_append_ends_a_cut_off_line_before_its_row(capfd):
    path = board.rows_file()
    path.parent.mkdir(parents=True)
    before = b"".join(map(line_of, GOOD)) + cut(LATER)
    path.write_bytes(before)
    board.append_rows([LATER])
    assert path.read_bytes() == before + b"\n" + line_of(LATER)  # the cut-off part kept, to be repaired by hand
    assert board.load_rows(path) == GOOD + [LATER]
    assert zoo_lines(capfd.readouterr().err) == [f"zoo: warning: {path}:3: a row cut off mid-line (a writer was "
                                                 "stopped: killed, or the disk full); skipped, the other rows are read"]


def test_an_append_is_one_write_and_a_failed_one_is_undone(monkeypatch):
    """A batch of rows goes in one write (a killed writer leaves all of it or a cut-off tail, never rows missing
    between whole ones); a write the disk refuses halfway leaves the file as it was, and says so in one line."""
    path = board.rows_file()
    board.append_rows(GOOD)
    before = path.read_bytes()
    real_write, writes = os.write, []

    def counted(fd, data):
        if os.fstat(fd).st_ino == path.stat().st_ino:
            writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counted)
    board.append_rows([LATER, row("d", 0.6)])
    assert writes == [line_of(LATER) + line_of(row("d", 0.6))]
    grown = path.read_bytes()

    def disk_full(fd, data):
        if os.fstat(fd).st_ino != path.stat().st_ino:
            return real_write(fd, data)
        real_write(fd, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(ResourceError) as refused:
        board.append_rows([row("e", 0.5)])
    assert str(refused.value) == (f"{path}: No space left on device; no row written (the file is as it was): free some "
                                  "space or check its permissions, then run again")
    assert path.read_bytes() == grown and grown.startswith(before)


def _ranked_run(out: Path) -> tuple[dict, subprocess.CompletedProcess]:
    """``zoo run`` of tiny XGBoost on wine in-process, which must end ok: (its summary.json, the process)."""
    proc = zoo_in_process("run", *XGB, "--out", out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    run_dir = Path(summary_block(proc.stdout)["run_dir"])
    return json.loads((run_dir / "summary.json").read_text()), proc


def test_a_run_ranks_against_the_rows_it_can_read(tmp_path):
    """The issue's case: the board's last line cut in half. The run ends ok with its summary and index row, ranked
    against the readable rows; one warning names the line; the file is left as it was."""
    out = tmp_path / "runs"
    first, _ = _ranked_run(out)
    env = json.loads((Path(first["run_dir"]) / "env.json").read_text())
    better = first["value"] + (0.5 if first["higher_is_better"] else -0.5)
    measured = row("tabular/xgb", better, benchmark=first["benchmark"], metric=first["metric"],
                   budget=first["budget"], hardware=env["hardware"], higher_is_better=first["higher_is_better"])
    path = board.rows_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(line_of(measured) + cut(LATER))
    before = path.read_bytes()
    summary, proc = _ranked_run(out)
    assert summary["status"] == "ok" and summary["exit_code"] == 0
    assert summary["rank"].startswith(f"2 of 2 on {first['benchmark']} @ {first['budget']}")  # the readable row
    assert summary_block(proc.stdout)["rank"] == summary["rank"]
    assert zoo_lines(proc.stderr) == [f"zoo: warning: {path}:2: a row cut off mid-line (a writer was stopped: killed, "
                                      "or the disk full); skipped, the other rows are read"]
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["ok", "ok"]
    assert path.read_bytes() == before


def test_a_run_ends_ok_when_the_board_cannot_be_read_at_all(tmp_path):
    out = tmp_path / "runs"
    board.rows_file().mkdir(parents=True)  # a folder where the file should be: unreadable, even to root
    summary, proc = _ranked_run(out)
    assert summary["status"] == "ok"
    assert summary["rank"] == f"not ranked: the board could not be read ({board.rows_file()}: Is a directory)"
    assert summary_block(proc.stdout)["rank"] == summary["rank"] and not zoo_lines(proc.stderr)
    assert [r["status"] for r in results.all_rows(out / "index.sqlite")] == ["ok"]


def _garbage(index: Path) -> None:
    index.write_bytes(b"not a database " * 400)


def _cut_in_half(index: Path) -> None:
    for i in range(200):  # a real index of several pages, then its second half lost
        results.upsert(index, {"run_id": f"old-{i}", "status": "ok", "description": "x" * 200})
    data = index.read_bytes()
    index.write_bytes(data[:len(data) // 2])


@pytest.mark.parametrize("damage", [_garbage, _cut_in_half], ids=["garbage", "cut_in_half"])
def test_a_damaged_index_stops_a_run_before_it_trains(tmp_path, damage):
    """The index is the list of runs: a run that cannot be entered in it stops at once with the fix (exit 2), the
    damaged file untouched; moved aside as the line says, the next run starts a new index."""
    out = tmp_path / "runs"
    index = out / "index.sqlite"
    out.mkdir()
    damage(index)
    before = index.read_bytes()
    proc = zoo_in_process("run", *XGB, "--out", out)
    detail = "file is not a database" if damage is _garbage else "database disk image is malformed"
    expected = [f"zoo: error: {index}: the results index cannot be read ({detail}); move it aside (mv {index} "
                f"{index}.damaged): a new one is started, and each run's folder keeps its summary.json"]
    assert proc.returncode == 2 and zoo_lines(proc.stderr) == expected, proc.stderr
    assert "Traceback" not in proc.stderr and not list(out.rglob("summary.json"))  # nothing trained
    listed = zoo_in_process("runs", "--out", out)
    assert listed.returncode == 2 and zoo_lines(listed.stderr) == expected
    assert index.read_bytes() == before
    index.rename(f"{index}.damaged")
    summary, _ = _ranked_run(out)
    assert summary["status"] == "ok" and [r["status"] for r in results.all_rows(index)] == ["ok"]


def test_an_index_damaged_during_a_run_does_not_undo_it(tmp_path, monkeypatch):
    """Damaged after the run started: the run still ends ok with its summary.json, and one warning says it is not
    in the index."""
    out = tmp_path / "runs"
    upsert = results.upsert

    def damaging(index, r):
        if r["status"] != "running":
            _garbage(index)
        upsert(index, r)

    monkeypatch.setattr(results, "upsert", damaging)
    summary, proc = _ranked_run(out)
    assert summary["status"] == "ok"
    index = out / "index.sqlite"
    run_id = Path(summary["run_dir"]).name
    assert zoo_lines(proc.stderr) == [f"zoo: warning: run {run_id} is not in the index: {index}: the results index "
                                      f"cannot be read (file is not a database); move it aside (mv {index} "
                                      f"{index}.damaged): a new one is started, and each run's folder keeps its "
                                      "summary.json"]


@pytest.mark.parametrize("command", [["bench", *RESNET, "--allow-dirty"], ["verify", "1", "--allow-dirty"]],
                         ids=["bench", "verify"])
@pytest.mark.parametrize("kind", ["results.jsonl", "verify.jsonl"])
def test_bench_and_verify_refuse_a_damaged_board_before_training(tmp_path, command, kind):
    """They render the board when done: told at the start, not after the training."""
    board.append_rows(GOOD)
    damaged = board.board_dir() / "benchmarks" / kind
    with open(damaged, "ab") as f:
        f.write(b"<<<<<<< HEAD\n")
    before = {p: p.read_bytes() for p in board.board_dir().rglob("*") if p.is_file()}
    out = tmp_path / "runs"
    proc = zoo_in_process(*command, "--out", out)
    number = 3 if kind == "results.jsonl" else 1
    assert proc.returncode == 2 and zoo_lines(proc.stderr) == [
        f"zoo: error: {damaged}:{number}: a merge conflict marker, not a row; not rendering the board without that "
        "row: repair or delete the line, then run again"], proc.stderr
    assert not out.exists()
    assert {p: p.read_bytes() for p in board.board_dir().rglob("*") if p.is_file()} == before


def _render_board(_) -> None:
    board_render.write_board()


def waiting_on(path: Path) -> int:
    """How many processes wait for a lock on ``path`` (Linux's /proc/locks: ``->`` marks a waiter)."""
    inode = f":{path.stat().st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line)


def wait_for(condition, alive, what: str, limit_s: float = 300) -> None:
    """Poll until ``condition()`` holds; fail if the process ends first (``alive()`` false). The limit only stops
    a hung test."""
    start = time.monotonic()
    while not condition():
        assert alive(), f"ended before {what}"
        assert time.monotonic() - start < limit_s, f"no {what} in {limit_s} s"
        time.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks to see a process waiting")
def test_renders_take_turns_so_the_last_holds_every_row(monkeypatch):
    """Two benches each append, then render: renders wait for each other, and each reads the rows once its turn
    comes, so a render that started early never replaces the board with one that lacks a later row."""
    board.append_rows(GOOD)
    folder = board.rows_file().parent
    ctx = multiprocessing.get_context("spawn")
    with board.rendering():
        child = ctx.Process(target=_render_board, args=(None,))
        child.start()
        wait_for(lambda: waiting_on(folder) == 1, child.is_alive, "the render waiting for its turn")
        board.append_rows([LATER])  # another bench's row, appended while the first render waits
    child.join()
    assert child.exitcode == 0
    assert (board.board_dir() / "leaderboard.md").read_text() == board_render.render(GOOD + [LATER], [], [])


def start_zoo(log: Path, *args) -> subprocess.Popen:
    """The real ``zoo`` in a process group of its own, its output in ``log`` (read while it runs)."""
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "recipe_zoo", *map(str, args)], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def kill_when(proc: subprocess.Popen, condition, what: str) -> None:
    """SIGKILL the command (and anything it started) as soon as ``condition()`` holds: the event, not a delay."""
    wait_for(condition, lambda: proc.poll() is None, what)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) in (-signal.SIGKILL, 0)  # 0: it had just finished on its own, which must be as whole


def printed(log: Path, start: str, times: int = 1):
    """The condition: ``times`` lines of the log begin with ``start`` (a summary key) or hold it (a log line)."""
    return lambda: sum(line.startswith(start) or f" {start}" in line
                       for line in log.read_text().splitlines()) >= times


def grew(path: Path, size: int):
    return lambda: path.exists() and path.stat().st_size > size


def whole_rows(path: Path) -> list[dict]:
    """The file's rows, every line whole (a cut-off line fails here)."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n")
    rows, damaged = board.parse_rows(data, path)
    assert not damaged, damaged
    return rows


# Killed after seed 0's summary with 5 seeds asked for: four more seeds stand between the kill and any row, so the
# event is well ahead of the append on any machine.
BENCH_KILLS = {"training_seed_0": ("on digits, budget 4steps, seed 0", 5, False),
               "after_seed_0": ("rank:", 5, False),
               "after_the_append": (None, 1, True)}


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(BENCH_KILLS))
def test_bench_killed_at_any_point_leaves_whole_rows(tmp_path, point):
    board.append_rows(GOOD)
    path = board.rows_file()
    before = path.read_bytes()
    line, seeds, appended = BENCH_KILLS[point]
    log = tmp_path / "bench.log"
    proc = start_zoo(log, "bench", *RESNET, "--seeds", seeds, "--out", tmp_path / "runs", "--allow-dirty")
    kill_when(proc, grew(path, len(before)) if appended else printed(log, line), point)
    rows = whole_rows(path)
    assert path.read_bytes().startswith(before) and rows[:2] == GOOD
    assert len(rows) == 2 + appended and all(r["n"] == seeds for r in rows[2:])  # a row only when all seeds ended
    assert zoo_in_process("board", "--write").returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after_seed_0", "after_the_append"])
def test_verify_killed_at_any_point_leaves_whole_checks(tmp_path, point):
    here = subprocess.run([sys.executable, "-c", "from recipe_zoo.core.envinfo import hardware; print(hardware())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # as the command will see it
    measured = row("vision/resnet", 0.5, budget="4steps", hardware=here, benchmark="digits", metric="test_accuracy",
                   overrides={"width": "8", "data": "digits", "eval_every": "0"})
    board.append_rows([measured])
    checks = board.checks_file()
    board.append_rows([{"row": "earlier", "passed": True, "date": "2026-12-01", "n": 1, "mean": 0.5}], checks)
    before = {p: p.read_bytes() for p in (board.rows_file(), checks)}
    log = tmp_path / "verify.log"
    appended = point == "after_the_append"
    proc = start_zoo(log, "verify", "1", "--seeds", 1 if appended else 5, "--out", tmp_path / "runs", "--allow-dirty")
    kill_when(proc, grew(checks, len(before[checks])) if appended else printed(log, "rank:"), point)
    assert board.rows_file().read_bytes() == before[board.rows_file()]
    rows = whole_rows(checks)
    assert checks.read_bytes().startswith(before[checks]) and len(rows) == 1 + appended
    assert all(r["row"] == board.row_id(measured) and r["n"] == 1 for r in rows[1:])


@pytest.mark.slow
def test_two_benches_at_once_on_one_board_keep_every_row(tmp_path):
    board.append_rows(GOOD)
    logs = [tmp_path / f"bench{w}.log" for w in (4, 8)]
    procs = [start_zoo(log, "bench", "vision/resnet", f"width={w}", *RESNET[2:], "--seeds", 1, "--out",
                       tmp_path / "runs", "--allow-dirty") for w, log in zip((4, 8), logs)]
    for proc, log in zip(procs, logs):
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    rows = whole_rows(board.rows_file())
    assert rows[:2] == GOOD and sorted(r["overrides"]["width"] for r in rows[2:]) == ["4", "8"]
    speed = whole_rows(board.speed_file())  # the 3-step budget is work: each bench adds its speed row too
    assert len(speed) == 2
    items = whole_rows(board.items_file())  # each row's per-item test scores: both rows' kept
    assert sorted(line["id"] for line in items) == sorted(r["items"] for r in rows[2:])
    assert (board.board_dir() / "leaderboard.md").read_text() == board_render.render(rows, [], [], speed, [], items)
