"""``zoo verify [ROW ...]``: run leaderboard rows again by their command and say whether they hold.

A row holds when the new mean is within ``2 * sqrt(s_old^2 / n_old + s_new^2 / n_new)`` of the old one, where s is
the seed standard deviation, and for one seed or seeds that all scored the same (no spread of their own) the
metric's floor below. Each check is
appended to ``benchmarks/verify.jsonl`` with the machine, commit and tree state it ran on; the board shows the
latest per row and machine, and a failed row stays on the board, flagged. A fixed-work row (steps, epochs) is
re-run on any machine, with at least ``CROSS_SEEDS`` seeds on both sides when the machine differs (``--seeds`` is
raised to it; one seed's floor is too weak a test of another machine's arithmetic); a time-budget row only on the
hardware it was measured on: a time budget buys another amount of work elsewhere.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

from recipe_zoo import bench, board, board_render, references, registry
from recipe_zoo.core.errors import ZooError

# The spread a single run is allowed when it has no seeds of its own: absolute for metrics on [0, 1] (accuracy,
# Dice, ROC-AUC, Spearman, kNN accuracy), relative for metrics with a scale (RMSE, bits per byte, FID).
UNIT_INTERVAL_FLOOR = 0.005
RELATIVE_FLOOR = 0.01
SCALED = ("rmse", "mae", "bpb", "fid")
CROSS_SEEDS = 3


def floor(row: dict) -> float:
    base = board.metric_base(row["metric"])
    return RELATIVE_FLOOR * abs(row["mean"]) if any(s in base for s in SCALED) else UNIT_INTERVAL_FLOOR


def spread(row: dict) -> float:
    """The row's seed standard deviation; the floor when it has none: one seed, or seeds that all scored the same
    (a saturated metric, a closed form), whose spread of 0 says nothing of another machine's arithmetic (digits:
    three seeds at 1.0000 on an H200 failed three at 0.9963 on a Xeon by one image in 360 at a tolerance of 0.0019)."""
    return row["std"] if row["n"] > 1 and row["std"] > 0 else floor(row)


def tolerance(old: dict, new: dict) -> float:
    return 2 * math.sqrt(spread(old) ** 2 / old["n"] + spread(new) ** 2 / new["n"])


def select(rows: list[dict], picks: list[str], hardware: str) -> list[int]:
    """Row numbers (1-based, file order) to verify: those named, the best rows of the named benchmarks, or by
    default the best row of every current-protocol table this machine can re-run (every fixed-work table, and
    the time-budget tables measured on this hardware). A best row is the best of the rows that are ranked: a stale
    row (``board.stale``: measured by a recipe that behaves differently since) is never picked unless named."""
    live = board.live(rows, board.all_rows("fingerprints.jsonl"))
    if not picks:
        tables = board.group([r for r in live if board.protocol(r) == board.PROTOCOL
                              and (r["hardware"] == hardware or board.fixed_work(r["budget"]))])
        return sorted(rows.index(board.ranked(t)[0]) + 1 for t in tables.values())
    chosen = []
    for pick in picks:
        if pick.isdigit():
            if not 1 <= int(pick) <= len(rows):
                raise ZooError(f"row {pick}: the board has rows 1..{len(rows)} (zoo verify --list)")
            chosen.append(int(pick))
            continue
        tables = [t for t in board.group(live).values() if t[0]["benchmark"] == pick]
        if not tables:
            raise ZooError(f"{pick!r}: neither a row number nor a benchmark on the board (zoo verify --list)")
        chosen += [rows.index(board.ranked(t)[0]) + 1 for t in tables]
    return sorted(set(chosen))


def check(old: dict, number: int, new: dict) -> dict:
    """The verification of row ``number`` (``old``) by ``new``, a row of the same command's seeds (re-run here, or
    measured at the same fixed work on another machine): what verify.jsonl records."""
    tol = tolerance(old, new)
    return {"row": board.row_id(old), "number": number, "date": new.get("date") or time.strftime("%Y-%m-%d"),
            "commit": new["commit"], "dirty": new["dirty"], "hardware": new["hardware"], "n": new["n"],
            "values": new["values"], "mean": new["mean"], "std": new["std"], "old_mean": old["mean"],
            "tolerance": tol, "passed": abs(new["mean"] - old["mean"]) <= tol}


def listing(rows: list[dict]) -> str:
    return "\n".join(f"{i:>3}  {r['benchmark']:<22} {r['budget']:<5} {board.value_text(r):<22} {board.label(r)} "
                     f"[{r['hardware']}, protocol {board.protocol(r)}]" for i, r in enumerate(rows, 1))


def verify(picks: list[str], *, seeds: int, out_root: Path, allow_dirty: bool, log=print) -> int:
    from recipe_zoo.core.envinfo import hardware

    board.check_whole()  # the board is rendered again at the end: refuse now, not after the training
    rows = board.load_rows()
    here = hardware()
    numbers = select(rows, picks, here)
    if not numbers:
        raise ZooError(f"no rows measured on this hardware ({here}) to verify; zoo verify --list shows them all")
    bench.check_provenance(allow_dirty)
    failed = 0
    for number in numbers:
        old = rows[number - 1]
        if old["hardware"] != here and not board.fixed_work(old["budget"]):
            log(f"row {number}: measured on {old['hardware']}, this machine is {here}: not re-run (a time budget "
                "buys another amount of work here; the reference tables' rows verify anywhere)")
            continue
        n = seeds
        if old["hardware"] != here:
            if old["n"] < CROSS_SEEDS:
                log(f"row {number}: measured on {old['hardware']} with {old['n']} seed(s); checking it on another "
                    f"machine takes at least {CROSS_SEEDS} seeds on both sides: not re-run (bench it again with "
                    f"--seeds {CROSS_SEEDS})")
                continue
            n = max(seeds, CROSS_SEEDS)  # one seed's floor is too weak a test of another machine's arithmetic
        spec = registry.get(old["recipe"])
        ref = references.of_row(old)  # a reference row re-runs its reference's settings (pinned since, too)
        overrides = ref.overrides if ref else [f"{k}={v}" for k, v in old.get("overrides", {}).items()]
        log(f"row {number}: {board.label(old)} on {old['benchmark']} @ {old['budget']}, {board.value_text(old)}: "
            f"running {n} seed(s)" + (f" (measured on {old['hardware']})" if old["hardware"] != here else ""))
        new = bench.bench_one(spec, seeds=n, budget_text=old["budget"], overrides=overrides, out_root=out_root,
                              command=old.get("command", ""), append=False, log=log)
        if new is None:
            failed += 1
            log(f"row {number}: a seed did not finish ok")
            continue
        entry = check(old, number, new)
        failed += not entry["passed"]
        board.append_rows([entry], board.checks_file())
        log(f"row {number}: {'holds' if entry['passed'] else 'FAILS'}: new {board.value_text(new)}, old "
            f"{board.value_text(old)}, |difference| {abs(new['mean'] - old['mean']):.4f} "
            f"{'<=' if entry['passed'] else '>'} {entry['tolerance']:.4f}")
    board_render.write_board()
    return 1 if failed else 0
