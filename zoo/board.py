"""The leaderboard's rows: where they are kept, read whole and appended under a lock; the tables of comparable rows
and their ranks; a run's standing among them (``board_render`` writes them out as leaderboard.md and charts).

Rows are compared only within one benchmark (dataset, split, metric) and one budget. A budget of work (steps,
epochs) buys the same training on every machine, so its table holds every device's rows, one per precision; a time
budget buys another amount of work on each machine, so its table is one hardware string's. Anything else is shown
in its own table, never ranked against each other.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import statistics
import sys
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from recipe_zoo.core.errors import ResourceError, ZooError

CODE_DIR = Path(__file__).resolve().parent.parent
SHIPPED = Path(__file__).resolve().parent / "benchmarks"  # an installed package: the committed rows, as package data


def in_checkout() -> bool:
    """Running from the repository (an editable install, or PYTHONPATH=CHECKOUT), not from an installed wheel."""
    return (CODE_DIR / "pyproject.toml").is_file() and (CODE_DIR / "benchmarks").is_dir()


def zoo_home() -> Path:
    """An installed package's own place for what it writes: benchmark rows, leaderboard.md, charts."""
    return Path(os.environ.get("ZOO_HOME", Path.home() / ".zoo")).expanduser()


def board_dir() -> Path:
    """Where ``benchmarks/results.jsonl`` is appended and ``leaderboard.md`` written: the checkout, or $ZOO_HOME
    for an installed package, whose committed rows are read from the package beside it ($ZOO_BOARD_DIR for tests)."""
    if "ZOO_BOARD_DIR" in os.environ:
        return Path(os.environ["ZOO_BOARD_DIR"])
    return CODE_DIR if in_checkout() else zoo_home()


def _files(name: str) -> list[Path]:
    """The rows of one kind: those shipped with an installed package, then this board's own."""
    own = board_dir() / "benchmarks" / name
    shipped = SHIPPED / name
    return [shipped, own] if "ZOO_BOARD_DIR" not in os.environ and not in_checkout() else [own]


def rows_file() -> Path:
    return board_dir() / "benchmarks" / "results.jsonl"


def reported_file() -> Path:
    return board_dir() / "benchmarks" / "reported.jsonl"


def checks_file() -> Path:
    return board_dir() / "benchmarks" / "verify.jsonl"


def items_file() -> Path:
    """Each row's per-item test scores (``paired``): what a paired rank compares."""
    return board_dir() / "benchmarks" / "items.jsonl"


def fingerprints_file() -> Path:
    """The recipes' behaviour fingerprints per commit (``benchmarks/fingerprint.py --record``): what tells a stale
    row."""
    return board_dir() / "benchmarks" / "fingerprints.jsonl"


def speed_file() -> Path:
    """The speed view: one row per measured (reference, machine), never a quality row."""
    return board_dir() / "benchmarks" / "speed.jsonl"


def transfer_file() -> Path:
    """The transfer table: a recipe fine-tuned from its own run on other data against from scratch
    (``benchmarks/transfer.py --record``); never a quality row of the ranked tables."""
    return board_dir() / "benchmarks" / "transfer.jsonl"


def all_rows(name: str = "results.jsonl", *, strict: bool = False) -> list[dict]:
    """Every row of one kind (results, reported, verify) the board shows."""
    return [row for path in _files(name) for row in load_rows(path, strict=strict)]


KINDS = ("results.jsonl", "reported.jsonl", "verify.jsonl", "speed.jsonl", "fingerprints.jsonl", "items.jsonl",
         "transfer.jsonl")
NUMBER = (int, float)
# What the board reads of each kind of row: a line without it is a damaged row, reported by file and line, not a
# KeyError in the middle of a render.
REQUIRED = {
    "results.jsonl": {"benchmark": str, "metric": str, "budget": str, "hardware": str, "recipe": str,
                      "higher_is_better": bool, "mean": NUMBER, "std": NUMBER, "n": int},
    "reported.jsonl": {"benchmark": str, "metric": str, "model": str, "value": object, "source": str},
    "verify.jsonl": {"row": str, "passed": bool, "date": str, "n": int, "mean": NUMBER},
    "speed.jsonl": {"benchmark": str, "budget": str, "hardware": str, "recipe": str, "train_seconds": NUMBER,
                    "n": int},
    "fingerprints.jsonl": {"commit": str, "committed": int, "hardware": str, "recipes": dict},
    "items.jsonl": {"id": str, "seeds": list},
    "transfer.jsonl": {"recipe": str, "source": list, "source_budget": str, "benchmark": str, "metric": str,
                       "higher_is_better": bool, "budget": str, "total_budget": str, "hardware": str, "n": int,
                       "arms": dict},
}
_warned: set[str] = set()  # each damaged line is said once per process, however often the board is read


class DamagedRow(ZooError):
    """A line of a result file that is not a whole row, met by a command that would rewrite the board without it."""


def load_rows(path: Path | None = None, *, strict: bool = False) -> list[dict]:
    """One file's rows; without a path, every result row the board shows. A line that is not a whole row (cut off
    by a killed writer or a full disk, a bad merge) is skipped with a one-line warning naming the file and line;
    with ``strict`` (a command about to rewrite the board) it raises instead, so that no row is dropped unseen."""
    if path is None:
        return all_rows(strict=strict)
    if not path.exists():
        return []
    with open(path, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)  # never half of a row being appended; closing releases it
        data = f.read()
    rows, damaged = parse_rows(data, path)
    if damaged and strict:
        raise DamagedRow(f"{damaged[0]}; not rendering the board without that row: repair or delete the line, then "
                         "run again")
    for where in damaged:
        if where not in _warned:
            _warned.add(where)
            print(f"zoo: warning: {where}; skipped, the other rows are read", file=sys.stderr, flush=True)
    return rows


def parse_rows(data: bytes, path: Path) -> tuple[list[dict], list[str]]:
    """The whole rows of a result file's bytes, and ``FILE:LINE: what is wrong`` for each line that is not one."""
    rows, damaged = [], []
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row, problem = _parse_row(line, REQUIRED.get(path.name, {}))
        if problem:
            damaged.append(f"{path}:{number}: {problem}")
        else:
            rows.append(row)
    return rows, damaged


def _parse_row(line: bytes, required: dict) -> tuple[dict | None, str]:
    if line.lstrip().startswith((b"<<<<<<<", b"=======", b">>>>>>>")):
        return None, "a merge conflict marker, not a row"
    if b"\0" in line:
        return None, "NUL bytes, not a row (the disk filled or lost power mid-write)"
    try:
        text = line.decode("utf-8")
        row = json.loads(text)
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as exc:
        stripped = text.strip()
        if stripped.startswith("{") and (not stripped.endswith("}") or exc.pos >= len(stripped)):  # stops early
            return None, "a row cut off mid-line (a writer was stopped: killed, or the disk full)"
        return None, f"not a JSON row ({exc.msg} at column {exc.colno})"
    if not isinstance(row, dict):
        return None, f"not a JSON object (a {type(row).__name__})"
    for key, kind in required.items():
        if key not in row:
            return None, f"a row without {key!r}"
        if not isinstance(row[key], kind) or (kind is NUMBER and isinstance(row[key], bool)):
            return None, f"{key!r} is {row[key]!r}, not {'a number' if kind is NUMBER else 'a ' + kind.__name__}"
    return row, ""


def check_whole() -> None:
    """``DamagedRow`` for a line of the board's files that is not a whole row (before a command that will render
    the board spends time training)."""
    for name in KINDS:
        all_rows(name, strict=True)


@contextmanager
def _locked(path: Path, how: int, flags: int):
    """An open descriptor of ``path`` under ``flock`` (shared for readers, exclusive for writers); closing it
    releases the lock."""
    fd = os.open(path, flags)
    try:
        fcntl.flock(fd, how)
        yield fd
    finally:
        os.close(fd)


def append_rows(rows: list[dict], path: Path | None = None) -> None:
    """Append the rows in one write under an exclusive lock, so concurrent writers lose nothing. A last line left
    cut off by a stopped writer is ended first (it stays, to be read as one damaged line), and a write that fails
    (a full disk) is undone, so the file ends with a whole row of its own or as it was."""
    path = path or rows_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode()
    with _locked(path, fcntl.LOCK_EX, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, size)
            raise ResourceError(f"{path}: {exc.strerror or exc}; no row written (the file is as it was): free some "
                                "space or check its permissions, then run again") from None


@contextmanager
def rendering():
    """One render of the board at a time (an exclusive lock on its ``benchmarks`` folder): each bench renders after
    its own append, so the last render holds every row, whichever bench ends last."""
    folder = rows_file().parent
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder, fcntl.LOCK_EX, os.O_RDONLY):
        yield


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


PROTOCOL = 2  # train / validation / test: selection on validation, test scored once (rows before it are 1)


def protocol(row: dict) -> int:
    return int(row.get("protocol", 1))


def fixed_work(budget: str) -> bool:
    """A budget of steps or epochs: the same work on every machine (a time budget, or text that is not a budget,
    is not)."""
    from recipe_zoo.core.budget import parse_budget

    try:
        return parse_budget(budget).kind != "seconds"
    except ValueError:
        return False


def precision_text(precision) -> str:
    """A fixed-work table's precision: the run's resolved one, ``-`` for recipes that have none (trees, closed
    forms)."""
    return precision or "-"


REFERENCE = "reference"  # the budget slot of a reference table's key: its rows' work is each recipe's own
EVERY_MACHINE = "every machine"


def place(row: dict) -> str:
    """What a table holds besides benchmark and budget: the precision for work budgets (every machine together),
    the hardware for time budgets."""
    return precision_text(row.get("precision")) if fixed_work(row["budget"]) else row["hardware"]


def table_key(row: dict) -> tuple:
    """(protocol, benchmark, split, metric, budget, place). A row that trained its recipe's reference on its
    benchmark (its work, precision and configuration: ``references.in_table``) is in that benchmark's reference
    table, whatever machine measured it: budget ``reference``, place ``every machine``."""
    from recipe_zoo import references

    if references.in_table(row):
        return (protocol(row), row["benchmark"], row.get("split", ""), row["metric"], REFERENCE, EVERY_MACHINE)
    return (protocol(row), row["benchmark"], row.get("split", ""), row["metric"], row["budget"], place(row))


def machine_free(budget_slot: str) -> bool:
    """A table key's budget slot that ranks every machine together: the reference table, or a budget of work."""
    return budget_slot == REFERENCE or fixed_work(budget_slot)


def interval(row: dict) -> tuple[float, float]:
    """The row's noise as an interval around its mean: the test set's own (the bootstrap over test items, averaged
    over seeds) where the row has it, else two standard errors over seeds; a point for one seed without either."""
    if row.get("ci_low") is not None and row.get("ci_high") is not None:
        half = (row["ci_high"] - row["ci_low"]) / 2
    else:
        half = 2 * row.get("std", 0.0) / math.sqrt(row["n"]) if row.get("n", 1) > 1 else 0.0
    return row["mean"] - half, row["mean"] + half


def ranked(rows: list[dict]) -> list[dict]:
    """Best first; ties keep the file order (earlier rows first)."""
    higher = rows[0]["higher_is_better"]
    return sorted(rows, key=lambda r: -r["mean"] if higher else r["mean"])


def ranks(rows: list[dict], known: dict[str, dict] | None = None) -> list[str]:
    """The rank of each row of ``ranked(rows)``: 1 + the number of rows with a better mean that are told apart from
    it (``together``). So a rank is a test, not a position: rows not told apart from the same better rows share a
    rank, identical rows always do, and a row below one ranked 2 may still be =1 when nothing tells it apart from
    the best. A rank held by more than one row is written ``=k``. ``known``: the rows' item scores by id (the
    board's, by default)."""
    order = ranked(rows)
    numbers = [1 + sum(1 for better in order[:i] if better["mean"] != row["mean"]
                       and not together(better, row, known)) for i, row in enumerate(order)]
    return [f"={n}" if numbers.count(n) > 1 else str(n) for n in numbers]


def together(best: dict, row: dict, known: dict[str, dict] | None = None) -> bool:
    """``row`` is not told apart from ``best``: the 95% interval of their paired difference (``paired``: seeds and
    the shared test items resampled together) includes zero. Rows that cannot be paired (no per-item scores, other
    items) with seeds on both sides: Welch's t-test on their seeds at 95% (the test items are the same or alike, so
    their noise is mostly shared: seed noise is what tells two rows apart); with one seed on a side, which gives no
    seed error to test with, their test intervals overlap."""
    from recipe_zoo import paired

    difference = paired.difference(best, row, known)
    if difference is not None:
        return difference[0] <= 0 <= difference[1]
    if best.get("n", 1) > 1 and row.get("n", 1) > 1:
        return paired.welch_together(best, row)
    lo, hi = interval(best)
    return interval(row)[0] <= hi and interval(row)[1] >= lo


def stale(row: dict, prints: list[dict]) -> str:
    """Why a row no longer measures its recipe ('' when it does, or when no fingerprint says): the recipe's
    behaviour fingerprint (``benchmarks/fingerprint.py``: its cases' metrics, curves and weights after a few steps)
    at the row's commit differs from that at the latest commit fingerprinted on the same machine. A pure refactor
    changes no fingerprint; cases that failed at either commit (options that did not exist yet) are not compared.
    The cases are short: a change seen only after many steps or under a time budget is not caught."""
    # a copy sent to a lent machine (C-copy) is commit C's tree: benchmarks/gpu_kit.sh packs a clean one
    commit, recipe = str(row.get("commit", "")).removesuffix("-copy"), row["recipe"]
    if len(commit) < 7 or not commit.isalnum():  # unknown, or a dirty tree's: not one commit's code
        return ""
    for then in (p for p in prints if p["commit"][:9] == commit[:9] and recipe in p["recipes"]):
        now = max((p for p in prints if p["hardware"] == then["hardware"] and recipe in p["recipes"]),
                  key=lambda p: p["committed"])
        old, new = then["recipes"][recipe], now["recipes"][recipe]
        changed = [case for case in sorted(old) if case in new and "FAILED" not in (old[case], new[case])
                   and old[case] != new[case]]
        if changed:
            return f"{recipe} behaves differently at {now['commit']} ({', '.join(changed)} changed)"
    return ""


def live(rows: list[dict], prints: list[dict]) -> list[dict]:
    """The rows that are not stale: those ranked."""
    return [r for r in rows if not stale(r, prints)]


def group(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Tables by key: the current protocol first, and within it the fixed-work tables before the time-budget ones."""
    tables: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        tables[table_key(row)].append(row)
    return dict(sorted(tables.items(), key=lambda kv: (-kv[0][0], not machine_free(kv[0][4]), kv[0][1:])))


def number_text(value, digits=4) -> str:
    """A number as a table cell: ``-`` for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def value_text(row: dict) -> str:
    """``0.8272 ± 0.0011`` over seeds; one seed has no spread to show: ``0.8272 (n=1)``."""
    mean = number_text(row["mean"])
    return f"{mean} ± {number_text(row['std'])}" if row["n"] > 1 else f"{mean} (n=1)"


def row_name(row: dict) -> str:
    """A row as the board names it: ``vision/resnet (reference)`` for a reference run (its settings are listed
    above its table), else its label; a row at a reference's work whose configuration is not known says so."""
    from recipe_zoo import references

    if references.of_row(row):
        return f"{row['recipe']} (reference)"
    ref = references.matching(row["recipe"], row["benchmark"], row["budget"])
    unknown = ref is not None and references.disagreement(row, ref) == "configuration unknown"
    return label(row) + (" (configuration unknown)" if unknown else "")


def label(row: dict) -> str:
    overrides = " ".join(f"{k}={v}" for k, v in sorted(row.get("overrides", {}).items()))
    return f"{row['recipe']} {overrides}".strip()


def metric_base(metric: str) -> str:
    return metric.removeprefix("test_").removeprefix("val_")


def row_id(row: dict) -> str:
    """What names a row across files: its command, hardware, commit and date."""
    return f"{row.get('command', '')} | {row['hardware']} | {row.get('commit', '')} | {row.get('date', '')}"
