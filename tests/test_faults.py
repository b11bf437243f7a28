"""Fault injection in the manner of SQLite's I/O-error tests: a short `zoo run` and a short `zoo bench` of tabular/mlp
are made again for every write point along their path (each write() to a file they opened for writing, each
os.write, os.fsync, os.replace and os.rename, each connection to the results index), failing that point alone
(a write: half its bytes, then ENOSPC; the rest: EIO). Afterwards the results index, the run folder, results.jsonl
and the board must each be as before or complete and identical to the same command without a fault, and a failed
run that left a checkpoint must resume to the run without a fault."""
import builtins
import errno
import io
import json
import os
import sqlite3
import subprocess
from pathlib import Path

from conftest import zoo_in_process

RUN = ["tabular/mlp", "data=wine", "hidden=16", "checkpoint_every=0", "log_every=0", "--budget", "4steps"]
BENCH = [*RUN, "--seeds", "1", "--allow-dirty"]
SAME = ("model.safetensors", "predictions.csv", "test_items.json", "split.csv")  # byte for byte, fault or none
VOLATILE = ("date", "train_seconds", "peak_mem_mb", "commit", "dirty")  # a board row's fields that vary run to run


class Writer:
    """A file opened for writing whose write() calls are points; the failing one writes half, then fails."""

    def __init__(self, f, faults):
        self._f, self._faults = f, faults

    def write(self, data):
        if self._faults.point("write", self._f.name):
            self._f.write(data[:len(data) // 2])
            self._f.flush()
            raise OSError(errno.ENOSPC, "No space left on device (injected)", self._f.name)
        return self._f.write(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __iter__(self):
        return iter(self._f)

    def __getattr__(self, name):
        return getattr(self._f, name)


class Faults:
    """Counts the write points under ``root`` while installed and fails the ``fail_at``-th (from 1; None: none)."""

    def __init__(self, root: Path, fail_at: int | None = None):
        self.root, self.fail_at, self.count, self.failed = str(root), fail_at, 0, None

    def point(self, kind: str, where) -> bool:
        if not str(where).startswith(self.root):
            return False
        self.count += 1
        if self.count == self.fail_at:
            self.failed = (kind, os.path.relpath(str(where), self.root))
            return True
        return False

    def install(self, monkeypatch):
        from recipe_zoo import results

        real_open, real_write, real_fsync = builtins.open, os.write, os.fsync
        real_replace, real_rename, real_connect = os.replace, os.rename, results.connect

        def fd_path(fd) -> str:
            try:
                return os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
            except OSError:
                return ""

        def opened(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+"):
                return Writer(f, self)
            return f

        def write(fd, data):
            if self.point("os.write", fd_path(fd)):
                real_write(fd, bytes(data)[:len(data) // 2])
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return real_write(fd, data)

        def fsync(fd):
            if self.point("fsync", fd_path(fd)):
                raise OSError(errno.EIO, "Input/output error (injected)")
            return real_fsync(fd)

        def renamer(real, kind):
            def rename(src, dst, *args, **kwargs):
                if self.point(kind, dst):
                    raise OSError(errno.EIO, "Input/output error (injected)", str(dst))
                return real(src, dst, *args, **kwargs)
            return rename

        def connect(path):
            if self.point("index", path):
                raise sqlite3.OperationalError("disk I/O error (injected)")
            return real_connect(path)

        monkeypatch.setattr(builtins, "open", opened)  # logging's FileHandler looks it up as it opens
        monkeypatch.setattr(io, "open", opened)  # pathlib's Path.open, write_text
        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", renamer(real_replace, "replace"))
        monkeypatch.setattr(os, "rename", renamer(real_rename, "rename"))
        monkeypatch.setattr(results, "connect", connect)


def faulted(root: Path, monkeypatch, fail_at: int | None, *argv):
    """``zoo ARGV`` in-process with the fault at ``fail_at``: (the result, the Faults)."""
    faults = Faults(root, fail_at)
    with monkeypatch.context() as m:
        faults.install(m)
        try:
            r = zoo_in_process(*argv)
        except Exception as exc:  # noqa: BLE001 - what `zoo` would show as a traceback
            r = subprocess.CompletedProcess(argv, 1, "", f"Traceback: {type(exc).__name__}: {exc}")
    return r, faults


def run_dirs(out: Path) -> list[Path]:
    folder = out / "tabular" / "mlp"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def outputs(run_dir: Path) -> dict:
    """What a finished run must equal: the files of SAME byte for byte, and its test and validation metrics."""
    got = {name: (run_dir / name).read_bytes() for name in SAME if (run_dir / name).exists()}
    summary = json.loads((run_dir / "summary.json").read_text())
    got["metrics"] = {k: v for k, v in summary["metrics"].items() if k.startswith(("test_", "val_"))}
    got["status"] = summary["status"]
    return got


def index_rows(out: Path) -> dict:
    from recipe_zoo import results

    return {row["run_id"]: row for row in results.all_rows(out / "index.sqlite")}


def check_run(out: Path, run_dir: Path | None, r, reference: dict, rows_before: dict) -> list[str]:
    """What is wrong with the index and the run folder after one faulted command (nothing: an empty list)."""
    wrong = [f"a traceback: {r.stderr.strip().splitlines()[-1][:200]}"] if "Traceback" in r.stderr else []
    try:
        rows = index_rows(out)
    except Exception as exc:  # noqa: BLE001 - the index must stay readable, whatever the fault
        return [*wrong, f"index unreadable: {exc}"]
    wrong += [f"an earlier row changed: {k}" for k, row in rows_before.items() if rows.get(k) != row]
    if run_dir is None:
        return wrong + ([f"exit {r.returncode} but no run folder"] if r.returncode == 0 else [])
    leftovers = [p.name for p in run_dir.rglob("*") if ".tmp" in p.name]
    wrong += [f"temp files left: {leftovers}"] if leftovers else []
    row = rows.get(run_dir.name) or {}
    summary = run_dir / "summary.json"
    done = summary.exists() and json.loads(summary.read_text()).get("status") == "ok"
    if done and outputs(run_dir) != reference:
        wrong.append("summary.json says ok but the run differs from the one without a fault")
    if r.returncode == 0 and not done:
        wrong.append("exit 0 without an ok summary.json")
    if r.returncode == 0 and row.get("status") != "ok" and "is not in the index" not in r.stderr:
        wrong.append(f"exit 0, index row {row.get('status')!r}, and no warning says so")
    if r.returncode != 0 and row.get("status") in ("ok", "running"):
        wrong.append(f"exit {r.returncode} but the index row is {row['status']!r}")
    return wrong


def resume_settles(out: Path, run_dir: Path, reference: dict) -> tuple[bool, list[str]]:
    """(whether it resumed, what is wrong): a failed run with a checkpoint resumes to the reference."""
    if not (run_dir / "checkpoint.pt").exists() or not (run_dir / "config.json").exists():
        return False, []
    r = zoo_in_process("run", "--resume", run_dir, "--out", out)
    if r.returncode != 0:
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        ok = r.returncode == 2 and len(lines) == 1
        return False, [] if ok else [f"resume: exit {r.returncode}: {r.stderr.strip()[-300:]}"]
    return True, [] if outputs(run_dir) == reference else ["resumed to other results than the run without a fault"]


def stable(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in VOLATILE}


def check_board(board: Path, before: dict, reference_rows: list[dict], r) -> list[str]:
    """results.jsonl (and items.jsonl) as before or with the reference's row whole; the rendered board as before
    or as `zoo board --write` renders the rows now; no temp files."""
    wrong = []
    for name in ("results.jsonl", "items.jsonl"):
        path = board / "benchmarks" / name
        now = path.read_bytes() if path.exists() else b""
        old = before.get(f"benchmarks/{name}", b"")
        added = now[len(old):]
        if not now.startswith(old):
            wrong.append(f"{name}: rows before the bench changed")
        elif name == "results.jsonl" and added:
            rows = [json.loads(line) for line in added.decode().splitlines()]
            if [stable(x) for x in rows] != [stable(x) for x in reference_rows]:
                wrong.append(f"{name}: the appended rows differ from the bench without a fault")
        if added and not added.endswith(b"\n"):
            wrong.append(f"{name}: ends in a cut-off line")
    if r.returncode == 0 and not (board / "benchmarks" / "results.jsonl").read_bytes()[
            len(before.get("benchmarks/results.jsonl", b"")):]:
        wrong.append("exit 0 but no row appended")
    leftovers = [p.name for p in board.rglob("*") if ".tmp" in p.name]
    wrong += [f"board temp files left: {leftovers}"] if leftovers else []
    pages = ("leaderboard.md", "leaderboard-protocol1.md", "leaderboard.html")
    rendered = {name: (board / name).read_bytes() for name in pages if (board / name).exists()}
    again = zoo_in_process("board", "--write")
    if again.returncode != 0:
        return wrong + [f"zoo board --write afterwards: {again.stderr.strip()[-200:]}"]
    for name, text in rendered.items():
        if text not in (before.get(name), (board / name).read_bytes()):
            wrong.append(f"{name}: neither as before nor a whole render of the rows")
    return wrong


def board_files(board: Path) -> dict:
    return {str(p.relative_to(board)): p.read_bytes() for p in board.rglob("*") if p.is_file()}


def sweep(root: Path, monkeypatch, command, checks) -> tuple[int, dict, dict]:
    """``command(fail_at)`` for every point its unfaulted run counts: (points, findings, counts by kind)."""
    _, counted = command(None)
    findings, kinds = {}, {}
    for n in range(1, counted.count + 1):
        state = checks.before()
        r, faults = command(n)
        assert faults.failed is not None, f"point {n} of {counted.count} was never reached"
        kinds[faults.failed[0]] = kinds.get(faults.failed[0], 0) + 1
        wrong = checks.after(state, r)
        if wrong:
            findings[f"{n}: {faults.failed[0]} {faults.failed[1]}"] = wrong
    return counted.count, findings, kinds


def report(what: str, points: int, kinds: dict, findings: dict, capsys, extra: str = ""):
    with capsys.disabled():
        print(f"\nfault injection, {what}: {points} points ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})"
              f"{extra}")
    assert not findings, "\n".join(f"{k}: {'; '.join(v)}" for k, v in findings.items())[:8000]


def test_every_write_point_of_a_run_fails_cleanly(tmp_path, monkeypatch, capsys):
    r, counted = faulted(tmp_path, monkeypatch, None, "run", *RUN, "--out", tmp_path / "reference")
    assert r.returncode == 0 and counted.failed is None, r.stderr[-2000:]
    reference = outputs(run_dirs(tmp_path / "reference")[0])
    plain = zoo_in_process("run", *RUN, "--out", tmp_path / "plain")  # the harness itself changes nothing
    assert plain.returncode == 0 and outputs(run_dirs(tmp_path / "plain")[0]) == reference
    assert counted.count > 100, counted.count  # every log line, JSON, CSV, checkpoint, rename, fsync, index write
    out = tmp_path / "faulted"
    resumed = []

    class Checks:
        @staticmethod
        def before():
            return set(run_dirs(out)), index_rows(out)

        @staticmethod
        def after(state, r):
            dirs, rows = state
            new = sorted(set(run_dirs(out)) - dirs)
            run_dir = new[0] if new else None
            wrong = check_run(out, run_dir, r, reference, rows)
            if run_dir is not None and r.returncode != 0:
                went_on, more = resume_settles(out, run_dir, reference)
                resumed.append(went_on)
                wrong += more
            return wrong

    points, findings, kinds = sweep(tmp_path, monkeypatch, lambda n: faulted(
        tmp_path, monkeypatch, n, "run", *RUN, "--out", out), Checks)
    assert sum(resumed) > 10  # the faults after the first checkpoint: resumed, and identical
    report("zoo run", points, kinds, findings, capsys, f"; {sum(resumed)} resumed from a checkpoint")


def test_every_write_point_of_a_bench_fails_cleanly(tmp_path, monkeypatch, capsys):
    board = Path(os.environ["ZOO_BOARD_DIR"])
    assert str(board).startswith(str(tmp_path))
    r, counted = faulted(tmp_path, monkeypatch, None, "bench", *BENCH, "--out", tmp_path / "reference")
    assert r.returncode == 0, r.stderr[-2000:]
    reference_rows = [json.loads(line) for line in (board / "benchmarks" / "results.jsonl").read_text().splitlines()]
    assert len(reference_rows) == 1 and counted.count > 100, counted.count
    out = tmp_path / "faulted"

    class Checks:
        @staticmethod
        def before():
            return board_files(board), index_rows(out)

        @staticmethod
        def after(state, r):
            files, rows = state
            wrong = [f"a traceback: {r.stderr.strip().splitlines()[-1][:200]}"] if "Traceback" in r.stderr else []
            try:
                now = index_rows(out)
                wrong += [f"an earlier index row changed: {k}" for k, row in rows.items() if now.get(k) != row]
            except Exception as exc:  # noqa: BLE001
                wrong.append(f"index unreadable: {exc}")
            return wrong + check_board(board, files, reference_rows, r)

    points, findings, kinds = sweep(tmp_path, monkeypatch, lambda n: faulted(
        tmp_path, monkeypatch, n, "bench", *BENCH, "--out", out), Checks)
    report("zoo bench", points, kinds, findings, capsys)
