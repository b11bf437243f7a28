"""The leaderboard: committed result rows, rendered to leaderboard.md, and a run's rank among them.

Rows are compared only within one benchmark (dataset, split, metric), one budget and one hardware
string; anything else is shown in its own table, never ranked against each other.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

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


def all_rows(name: str = "results.jsonl") -> list[dict]:
    """Every row of one kind (results, reported, verify) the board shows."""
    return [row for path in _files(name) for row in load_rows(path)]


def load_rows(path: Path | None = None) -> list[dict]:
    """One file's rows; without a path, every result row the board shows."""
    if path is None:
        return all_rows()
    if not path.exists():
        return []
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not a JSON row ({exc})") from None
    return rows


def append_rows(rows: list[dict], path: Path | None = None) -> None:
    """Append under an exclusive lock, one write per row, so concurrent benches lose nothing."""
    path = path or rows_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


PROTOCOL = 2  # train / validation / test: selection on validation, test scored once (rows before it are 1)


def protocol(row: dict) -> int:
    return int(row.get("protocol", 1))


def table_key(row: dict) -> tuple:
    return (protocol(row), row["benchmark"], row.get("split", ""), row["metric"], row["budget"], row["hardware"])


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


def ranks(rows: list[dict]) -> list[str]:
    """The rank of each row of ``ranked(rows)``: ``=1`` for every row whose interval overlaps the best row's (they
    are not told apart by this data), then 2, 3, ... by mean."""
    order = ranked(rows)
    lo, hi = interval(order[0])
    tied = [i == 0 or (interval(r)[0] <= hi and interval(r)[1] >= lo) for i, r in enumerate(order)]
    if sum(tied) == 1:
        return [str(i + 1) for i in range(len(order))]
    out, next_rank = [], sum(tied) + 1
    for t in tied:
        out.append("=1" if t else str(next_rank))
        next_rank += 0 if t else 1
    return out


def group(rows: list[dict]) -> dict[tuple, list[dict]]:
    tables: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        tables[table_key(row)].append(row)
    return dict(sorted(tables.items(), key=lambda kv: (-kv[0][0], kv[0][1:])))


def _fmt(value, digits=4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def value_text(row: dict) -> str:
    """``0.8272 ± 0.0011`` over seeds; one seed has no spread to show: ``0.8272 (n=1)``."""
    return f"{_fmt(row['mean'])} ± {_fmt(row['std'])}" if row["n"] > 1 else f"{_fmt(row['mean'])} (n=1)"


def label(row: dict) -> str:
    overrides = " ".join(f"{k}={v}" for k, v in sorted(row.get("overrides", {}).items()))
    return f"{row['recipe']} {overrides}".strip()


def metric_base(metric: str) -> str:
    return metric.removeprefix("test_").removeprefix("val_")


def verified(row: dict, checks: list[dict]) -> str:
    """The latest ``zoo verify`` of this row: ``ok 2026-12-01`` or ``FAILED 2026-12-01``; ``-`` if never."""
    mine = [c for c in checks if c["row"] == row_id(row)]
    if not mine:
        return "-"
    last = mine[-1]
    return f"{'ok' if last['passed'] else '**FAILED**'} {last['date']} (n={last['n']}: {_fmt(last['mean'])})"


def row_id(row: dict) -> str:
    """What names a row across files: its command, hardware, commit and date."""
    return f"{row.get('command', '')} | {row['hardware']} | {row.get('commit', '')} | {row.get('date', '')}"


def render(rows: list[dict], reported: list[dict], checks: list[dict] = ()) -> str:
    """Markdown, deterministic for the same rows (no clock, no machine state)."""
    out = ["# Leaderboard", "",
           "Rendered by `zoo board --write` from `benchmarks/results.jsonl`; do not edit by hand. "
           "Rows are ranked only against rows of the same protocol, benchmark, budget and hardware. "
           "The value is the test metric, mean ± std over n seeds (one seed shows no ±); *test 95%* is the "
           "bootstrap interval over the test items (the test set's own noise, averaged over seeds); rows whose "
           "interval overlaps the best row's share rank =1. *validation* is what selection read.", ""]
    if not rows:
        out.append("No measured rows yet.")
    reported_by_bench = defaultdict(list)
    for r in reported:
        reported_by_bench[(r["benchmark"], metric_base(r["metric"]))].append(r)
    shown_protocol = None
    for (proto, bench, split, metric, budget, hardware), table in group(rows).items():
        if proto != shown_protocol:
            shown_protocol = proto
            if proto < PROTOCOL:
                out += [f"# Protocol {proto}: before train / validation / test", "",
                        "Measured before selection was confined to a validation split (some defaults were chosen on "
                        "the split reported here): shown apart, never ranked against the tables above.", ""]
        higher = table[0]["higher_is_better"]
        out += [f"## {bench} · {metric} · {budget} · {hardware}" + (f" · protocol {proto}" if proto < PROTOCOL
                                                                    else ""), "",
                f"Metric: **{metric}** on split `{split}` ({'higher' if higher else 'lower'} is better). "
                f"Budget {budget} of training time per run.", ""]
        if proto >= PROTOCOL:
            out += ["| rank | recipe | value | test 95% | validation | n | train s | params (M) | peak mem (MB) | "
                    "commit | date | verified | command |", "|---:|---|---|---|---|---:|---:|---:|---:|---|---|---|---|"]
        else:
            out += ["| rank | recipe | value | n | train s | params (M) | peak mem (MB) | commit | date | command |",
                    "|---:|---|---|---:|---:|---:|---:|---|---|---|"]
        for rank, r in zip(ranks(table), ranked(table)):
            extra = ""
            if proto >= PROTOCOL:
                ci = f"{_fmt(r.get('ci_low'))}..{_fmt(r.get('ci_high'))}" if r.get("ci_low") is not None else "-"
                extra = f" {ci} | {_fmt(r.get('val_mean'))} |"
            tail = f" {verified(r, checks)} |" if proto >= PROTOCOL else ""
            out.append(f"| {rank} | {label(r)} | {value_text(r)} |{extra} {r['n']} | "
                       f"{_fmt(r.get('train_seconds'), 1)} | {_fmt(r.get('params_M'), 2)} | "
                       f"{_fmt(r.get('peak_mem_mb'), 0)} | {r.get('commit', '-')} | {r.get('date', '-')} |{tail} "
                       f"`{r.get('command', '')}` |")
        out.append("")
        elsewhere = reported_by_bench.pop((bench, metric_base(metric)), []) if proto >= PROTOCOL else []
        if elsewhere:
            out += _reported_table(elsewhere)
    for (bench, metric), elsewhere in sorted(reported_by_bench.items()):
        out += [f"## {bench} · {metric} (reported elsewhere only)", ""] + _reported_table(elsewhere)
    return "\n".join(out).rstrip() + "\n"


def _reported_table(rows: list[dict]) -> list[str]:
    out = ["Reported elsewhere or run with other tools, **not measured by `zoo bench`** (context only):", "",
           "| model | value | split | the same split as ours? | source |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['value']} | {r.get('split', 'not stated')} | {r.get('same_split', '?')} | "
                   f"{r['source']} |")
    return out + [""]


def write_board() -> Path:
    board = board_dir() / "leaderboard.md"
    text = render(all_rows(), all_rows("reported.jsonl"), all_rows("verify.jsonl"))
    board.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=board.parent, prefix=".leaderboard.", suffix=".tmp")  # one per writer
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, board)  # atomic: readers never see half a leaderboard, writers never share a temp file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return board


def write_charts() -> list[Path]:
    """Every table's chart, drawn again (charts of tables that no longer exist are removed)."""
    from recipe_zoo.plots import plot_board

    folder = board_dir() / "benchmarks" / "plots"
    for old in folder.glob("*.png"):
        old.unlink()
    return plot_board(all_rows(), folder)


def rank_line(value: float, *, benchmark: str, budget: str, hardware: str, metric: str, higher: bool,
              rows: list[dict]) -> str:
    """Where a value stands among comparable rows (this protocol, benchmark, budget, hardware and metric): rank,
    best, delta, and whether it lies inside the best row's interval (its test-set noise, or two seed errors)."""
    table = [r for r in rows if r["benchmark"] == benchmark and r["budget"] == budget and r["hardware"] == hardware
             and r["metric"] == metric and protocol(r) == PROTOCOL]
    if not table:
        return f"unranked: no leaderboard rows for {benchmark} @ {budget} on {hardware}"
    best = ranked(table)[0]
    better = sum(1 for r in table if (r["mean"] > value if higher else r["mean"] < value))
    delta = value - best["mean"]
    lo, hi = interval(best)
    verdict = "within the best row's interval" if lo <= value <= hi else (
        "better than the best row" if (delta > 0) == higher else "outside the best row's interval")
    return (f"{better + 1} of {len(table) + 1} on {benchmark} @ {budget}, {hardware} "
            f"(best {value_text(best)}, {label(best)} @ {best.get('commit', '?')}; delta {delta:+.4f}, {verdict})")


def standing(summary: dict, hardware: str, higher: bool, index: Path, run_id: str | None = None) -> str:
    """The ``rank:`` line: against the committed leaderboard, or for own data the user's own runs."""
    bench = summary["benchmark"]
    rows = local_board_rows(index, bench, exclude=run_id) if bench.startswith("own:") else load_rows()
    return rank_line(summary["value"], benchmark=bench, budget=summary["budget"], hardware=hardware,
                     metric=summary["metric"], higher=higher, rows=rows)


def local_board_rows(index: Path, benchmark: str, exclude: str | None = None) -> list[dict]:
    """The local index's finished runs on one benchmark, as leaderboard rows (seeds pooled by config)."""
    from recipe_zoo import results

    pooled: dict[tuple, list[dict]] = {}
    for r in results.all_rows(index):
        if r["benchmark"] == benchmark and r["status"] == "ok" and r["run_id"] != exclude and r["metric"] is not None:
            pooled.setdefault((r["description"], r["budget"], r["hardware"], r["metric_name"]), []).append(r)
    rows = []
    for (description, budget, hardware, metric), runs in pooled.items():
        mean, std = mean_std([r["metric"] for r in runs])
        rows.append({"protocol": PROTOCOL, "benchmark": benchmark, "metric": metric, "budget": budget,
                     "hardware": hardware,
                     "recipe": description, "mean": mean, "std": std, "n": len(runs),
                     "higher_is_better": bool(runs[0]["higher_is_better"]),
                     "train_seconds": sum(r["train_seconds"] or 0 for r in runs) / len(runs),
                     "params_M": runs[0]["params_M"], "commit": runs[-1]["commit_id"],
                     "date": (runs[-1]["finished"] or "")[:10], "command": f"zoo run {description}"})
    return rows
