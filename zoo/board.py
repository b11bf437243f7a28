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


def board_dir() -> Path:
    """The checkout holding ``benchmarks/results.jsonl`` and ``leaderboard.md`` ($ZOO_BOARD_DIR for tests)."""
    return Path(os.environ.get("ZOO_BOARD_DIR", CODE_DIR))


def rows_file() -> Path:
    return board_dir() / "benchmarks" / "results.jsonl"


def reported_file() -> Path:
    return board_dir() / "benchmarks" / "reported.jsonl"


def load_rows(path: Path | None = None) -> list[dict]:
    path = path or rows_file()
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


def table_key(row: dict) -> tuple:
    return (row["benchmark"], row.get("split", ""), row["metric"], row["budget"], row["hardware"])


def ranked(rows: list[dict]) -> list[dict]:
    """Best first; ties keep the file order (earlier rows first)."""
    higher = rows[0]["higher_is_better"]
    return sorted(rows, key=lambda r: -r["mean"] if higher else r["mean"])


def group(rows: list[dict]) -> dict[tuple, list[dict]]:
    tables: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        tables[table_key(row)].append(row)
    return dict(sorted(tables.items()))


def _fmt(value, digits=4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def label(row: dict) -> str:
    overrides = " ".join(f"{k}={v}" for k, v in sorted(row.get("overrides", {}).items()))
    return f"{row['recipe']} {overrides}".strip()


def render(rows: list[dict], reported: list[dict]) -> str:
    """Markdown, deterministic for the same rows (no clock, no machine state)."""
    out = ["# Leaderboard", "",
           "Rendered by `zoo board --write` from `benchmarks/results.jsonl`; do not edit by hand. "
           "Rows are ranked only against rows of the same benchmark, budget and hardware. "
           "Values are mean ± std over n seeds.", ""]
    if not rows:
        out.append("No measured rows yet.")
    reported_by_bench = defaultdict(list)
    for r in reported:
        reported_by_bench[(r["benchmark"], r["metric"])].append(r)
    for (bench, split, metric, budget, hardware), table in group(rows).items():
        higher = table[0]["higher_is_better"]
        out += [f"## {bench} · {metric} · {budget} · {hardware}", "",
                f"Metric: **{metric}** on split `{split}` ({'higher' if higher else 'lower'} is better). "
                f"Budget {budget} of training time per run.", "",
                "| rank | recipe | value | n | train s | params (M) | peak mem (MB) | commit | date | command |",
                "|---:|---|---|---:|---:|---:|---:|---|---|---|"]
        for i, r in enumerate(ranked(table), 1):
            out.append(f"| {i} | {label(r)} | {_fmt(r['mean'])} ± {_fmt(r['std'])} | {r['n']} | "
                       f"{_fmt(r.get('train_seconds'), 1)} | {_fmt(r.get('params_M'), 2)} | "
                       f"{_fmt(r.get('peak_mem_mb'), 0)} | {r.get('commit', '-')} | {r.get('date', '-')} | "
                       f"`{r.get('command', '')}` |")
        out.append("")
        elsewhere = reported_by_bench.pop((bench, metric), [])
        if elsewhere:
            out += _reported_table(elsewhere)
    for (bench, metric), elsewhere in sorted(reported_by_bench.items()):
        out += [f"## {bench} · {metric} (reported elsewhere only)", ""] + _reported_table(elsewhere)
    return "\n".join(out).rstrip() + "\n"


def _reported_table(rows: list[dict]) -> list[str]:
    out = ["Reported elsewhere or run with other tools, **not measured by `zoo bench`** (context only):", "",
           "| model | value | source |", "|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['value']} | {r['source']} |")
    return out + [""]


def write_board() -> Path:
    board = board_dir() / "leaderboard.md"
    text = render(load_rows(rows_file()), load_rows(reported_file()))
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


def rank_line(value: float, *, benchmark: str, budget: str, hardware: str, metric: str, higher: bool,
              rows: list[dict]) -> str:
    """Where a value stands among comparable rows: rank, best, delta, and whether it is within noise."""
    table = [r for r in rows if r["benchmark"] == benchmark and r["budget"] == budget and r["hardware"] == hardware
             and r["metric"] == metric]
    if not table:
        return f"unranked: no leaderboard rows for {benchmark} @ {budget} on {hardware}"
    best = ranked(table)[0]
    better = sum(1 for r in table if (r["mean"] > value if higher else r["mean"] < value))
    delta = value - best["mean"]
    noise = max(best["std"], 1e-12)
    verdict = "within the best row's seed spread" if abs(delta) <= noise else (
        "better than the best row" if (delta > 0) == higher else "outside the best row's seed spread")
    return (f"{better + 1} of {len(table) + 1} on {benchmark} @ {budget}, {hardware} "
            f"(best {best['mean']:.4f} ± {best['std']:.4f}, {label(best)} @ {best.get('commit', '?')}; "
            f"delta {delta:+.4f}, {verdict})")
