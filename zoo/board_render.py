"""The leaderboard rendered: ``leaderboard.md`` (a markdown table per benchmark, budget and hardware, the rows
ranked within it, results reported elsewhere beside them) and a chart per table, each rewritten whole under the
board's lock (``board.rendering``)."""
from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from pathlib import Path

from recipe_zoo.board import (KINDS, PROTOCOL, all_rows, board_dir, group, label, metric_base, number_text, ranked,
                              ranks, rendering, row_id, value_text)


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
                ci = f"{number_text(r.get('ci_low'))}..{number_text(r.get('ci_high'))}" if r.get("ci_low") is not None else "-"
                extra = f" {ci} | {number_text(r.get('val_mean'))} |"
            tail = f" {verified(r, checks)} |" if proto >= PROTOCOL else ""
            out.append(f"| {rank} | {label(r)} | {value_text(r)} |{extra} {r['n']} | "
                       f"{number_text(r.get('train_seconds'), 1)} | {number_text(r.get('params_M'), 2)} | "
                       f"{number_text(r.get('peak_mem_mb'), 0)} | {r.get('commit', '-')} | {r.get('date', '-')} |{tail} "
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


def verified(row: dict, checks: list[dict]) -> str:
    """The latest ``zoo verify`` of this row: ``ok 2026-12-01`` or ``FAILED 2026-12-01``; ``-`` if never."""
    mine = [c for c in checks if c["row"] == row_id(row)]
    if not mine:
        return "-"
    last = mine[-1]
    return f"{'ok' if last['passed'] else '**FAILED**'} {last['date']} (n={last['n']}: {number_text(last['mean'])})"


def write_board() -> Path:
    """leaderboard.md rendered again, replaced whole; refused (``DamagedRow``) while a row cannot be read."""
    with rendering():
        return _write_board(render(*(all_rows(kind, strict=True) for kind in KINDS)))


def _write_board(text: str) -> Path:
    board = board_dir() / "leaderboard.md"
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
    with rendering():
        rows = all_rows(strict=True)  # before any chart is removed
        for old in folder.glob("*.png"):
            old.unlink()
        return plot_board(rows, folder)
