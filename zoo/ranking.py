"""Where a result stands: the rows it is ranked among (``comparable``), its ``rank:`` line, the hint a newcomer
gets (the work a run did and the reference that would rank it, with its time here), and the local index's own-data
runs as rows."""
from __future__ import annotations

import statistics
from pathlib import Path

from recipe_zoo.board import (EVERY_MACHINE, PROTOCOL, all_rows, fixed_work, interval, live, load_rows, mean_std,
                              precision_text, protocol, ranked, row_name, table_key, value_text)
from recipe_zoo.core.errors import ZooError


def comparable(rows: list[dict], *, benchmark: str, budget: str, metric: str, hardware: str, precision=None,
               recipe: str = "", config: dict | None = None) -> list[dict]:
    """The current-protocol rows a result is ranked among: its table's (``table_key``), split aside. The
    reference table of its benchmark when it is at its recipe's reference work and precision; else at a budget of
    work, every machine's rows of that work and precision; at a time budget, this hardware's rows. ``config``: the
    run's resolved configuration (its config.json), which decides whether it trained the reference."""
    def unsplit(key: tuple) -> tuple:  # the run's own split is not known here: compare the rest of the key
        return key[:2] + key[3:]

    me = unsplit(table_key({"protocol": PROTOCOL, "benchmark": benchmark, "metric": metric, "budget": budget,
                            "hardware": hardware, "precision": precision, "recipe": recipe, "config": config}))
    return [r for r in rows if protocol(r) == PROTOCOL and unsplit(table_key(r)) == me]


def table_name(benchmark: str, budget: str, hardware: str, precision=None, recipe: str = "",
               config: dict | None = None) -> str:
    """``tinyshakespeare @ 300steps (the reference table, fp32), every machine``, ``tinyshakespeare @ 300steps
    (fp32), every machine`` or ``tinyshakespeare @ 5m, <hardware>``."""
    from recipe_zoo import references

    if references.in_table({"recipe": recipe, "benchmark": benchmark, "budget": budget, "precision": precision,
                            "config": config}):
        return f"{benchmark} @ {budget} (the reference table, {precision_text(precision)}), {EVERY_MACHINE}"
    if fixed_work(budget):
        return f"{benchmark} @ {budget} ({precision_text(precision)}), {EVERY_MACHINE}"
    return f"{benchmark} @ {budget}, {hardware}"


def rank_line(value: float, *, benchmark: str, budget: str, hardware: str, metric: str, higher: bool,
              rows: list[dict], precision=None, recipe: str = "", run_items: dict | None = None,
              stale: list[dict] = (), config: dict | None = None) -> str:
    """Where a value stands among comparable rows (``comparable``): rank, best, delta, and how it compares with the
    best row. ``run_items``: the run's per-item test scores as an ``items.jsonl`` line (``paired.items_line``);
    where the best row kept its own on the same test items, the run is paired with it (the 95% interval of run
    minus best, the best row's seeds and the shared items resampled together, as the board ranks its rows);
    otherwise the value is set against the best row's interval (its test-set noise, or two seed errors).
    ``stale``: the board's stale rows, which are never ranked against; an unranked line counts those of its table,
    so a table the board shows is not called empty."""
    where = dict(benchmark=benchmark, budget=budget, metric=metric, hardware=hardware, precision=precision,
                 recipe=recipe, config=config)
    table = comparable(rows, **where)
    name = table_name(benchmark, budget, hardware, precision, recipe, config)
    if not table:
        old = len(comparable(list(stale), **where))
        return (f"unranked: no current leaderboard rows for {name} ({old} stale: measured by an earlier version of "
                f"the recipe, shown on the board, not ranked)" if old else f"unranked: no leaderboard rows for {name}")
    best = ranked(table)[0]
    better = sum(1 for r in table if (r["mean"] > value if higher else r["mean"] < value))
    delta = value - best["mean"]
    return (f"{better + 1} of {len(table) + 1} on {name} (best {value_text(best)}, {row_name(best)} @ "
            f"{best.get('commit', '?')}; delta {delta:+.4f}, {_verdict(value, best, higher, run_items)})")


def _verdict(value: float, best: dict, higher: bool, run_items: dict | None) -> str:
    from recipe_zoo import paired

    if run_items is not None:
        known = {**paired.lines(), run_items["id"]: run_items}
        difference = paired.difference({"items": run_items["id"]}, best, known)
        if difference is not None:
            lo, hi = difference
            told = "not told apart from it" if lo <= 0 <= hi else (
                "better than it" if (lo > 0) == higher else "worse than it")
            return f"paired with the best row, 95% {lo:+.4f}..{hi:+.4f}: {told}"
    lo, hi = interval(best)
    return "within the best row's interval" if lo <= value <= hi else (
        "better than the best row" if (value > best["mean"]) == higher else "outside the best row's interval")


def standing(summary: dict, hardware: str, higher: bool, index: Path, run_id: str | None = None,
             run_dir: Path | None = None) -> str:
    """The ``rank:`` line: against the committed leaderboard, or for own data the user's own runs. A time-budget
    run on a machine with no table of its own is told the work it did and the reference run that would rank it.
    ``run_dir``: the run's folder, whose per-item test scores pair it with the best row."""
    from recipe_zoo import paired

    bench = summary["benchmark"]
    # The local index keeps no precision (an explicit precision= is in the run's description): own-data tables
    # do not split by it.
    precision = None if bench.startswith("own:") else (summary.get("extra") or {}).get("precision")
    try:
        every = [] if bench.startswith("own:") else load_rows()
        rows = local_board_rows(index, bench, exclude=run_id) if bench.startswith("own:") else \
            live(every, all_rows("fingerprints.jsonl"))  # stale rows are shown, never ranked against
    except OSError as exc:  # a damaged line is skipped; a file that cannot be read at all leaves the run unranked
        return f"not ranked: the board could not be read ({exc.filename}: {exc.strerror or exc})"
    except ZooError as exc:
        return f"not ranked: the board could not be read ({exc})"
    kept = {id(r) for r in rows}
    line = rank_line(summary["value"], benchmark=bench, budget=summary["budget"], hardware=hardware,
                     metric=summary["metric"], higher=higher, rows=rows, precision=precision,
                     recipe=summary.get("recipe", ""), stale=[r for r in every if id(r) not in kept],
                     config=_run_config(run_dir),
                     # own-data rows keep no item scores: nothing to pair a run with there
                     run_items=None if run_dir is None or bench.startswith("own:") else paired.items_line([run_dir]))
    if line.startswith("unranked") and not bench.startswith("own:"):
        line += reference_hint(summary, hardware)
    return line


def _run_config(run_dir: Path | None) -> dict | None:
    """The run's resolved configuration (config.json), or None where there is none to read."""
    import json

    try:
        return json.loads((run_dir / "config.json").read_text())["config"] if run_dir is not None else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def reference_hint(summary: dict, hardware: str) -> str:
    """``; this run did 1,442 steps in 300 s; to rank on every machine: zoo run vision/resnet --reference (1500steps)
    (about 5.2 min of training here, the speed view)`` for a run whose benchmark has a reference of its recipe; the
    work alone otherwise."""
    from recipe_zoo import references

    metrics = summary.get("metrics") or {}
    reference = next((r for r in references.on_benchmark(summary["benchmark"]) if r.recipe == summary["recipe"]),
                     None)
    did = ""
    if metrics.get("steps"):
        tokens = f" ({int(metrics['tokens']):,} tokens)" if metrics.get("tokens") else ""
        did = f"; this run did {int(metrics['steps']):,} steps{tokens} in {summary['train_seconds']:.0f} s"
    if reference is None:
        return did
    if reference.work == summary["budget"]:
        return f"; no row measured yet: {reference.command('bench')} measures one (3 seeds)"
    seconds, source = speed_estimate(reference, hardware, summary)
    about = "" if seconds is None else f" (about {seconds / 60:.1f} min of training here, {source})"
    return did + f"; to rank on every machine: {reference.command()} ({reference.work}){about}"


def speed_estimate(reference, hardware: str, summary: dict) -> tuple[float | None, str]:
    """The training seconds ``reference`` takes on this hardware and where that figure comes from: the speed view's
    median where it has this machine, else this run's own step rate scaled to the reference's steps (the same
    recipe: the same step where the run's batch is the reference's; the source says so where the run trained in
    another precision than the reference pins, as a bf16 run's rate does not hold for an fp32 reference)."""
    from recipe_zoo import references
    from recipe_zoo.core.budget import parse_budget

    pinned = references.pinned_precision(reference)
    here = [r["train_seconds"] for r in all_rows("speed.jsonl") if r["hardware"] == hardware
            and (r["recipe"], r["benchmark"], r["budget"]) == (reference.recipe, reference.benchmark, reference.work)
            and r.get("precision") == pinned]  # a bf16 row's time is not the fp32 reference's
    if here:
        return statistics.median(here), "the speed view"
    work = parse_budget(reference.work)
    steps = (summary.get("metrics") or {}).get("steps")
    if work.kind != "steps" or not steps or not summary.get("train_seconds"):
        return None, ""
    ran = (summary.get("extra") or {}).get("precision")
    other = f" in {ran}; the reference trains in {pinned}" if pinned and ran and ran != pinned else ""
    return summary["train_seconds"] * work.amount / steps, f"from this run's step rate{other}"


def local_board_rows(index: Path, benchmark: str, exclude: str | None = None, *, keyed: bool = False) -> list[dict]:
    """The local index's finished runs on one benchmark, as leaderboard rows (seeds pooled by config). ``keyed``:
    also the runs whose key adds fields to it (``own:HASH:target=income`` for ``own:HASH``), each its own table."""
    from recipe_zoo import results

    pooled: dict[tuple, list[dict]] = {}
    for r in results.all_rows(index):
        mine = r["benchmark"] == benchmark or keyed and r["benchmark"].startswith(benchmark + ":")
        if mine and r["status"] == "ok" and r["run_id"] != exclude and r["metric"] is not None:
            pooled.setdefault((r["benchmark"], r["description"], r["budget"], r["hardware"], r["metric_name"]),
                              []).append(r)
    rows = []
    for (key, description, budget, hardware, metric), runs in pooled.items():
        mean, std = mean_std([r["metric"] for r in runs])
        rows.append({"protocol": PROTOCOL, "benchmark": key, "metric": metric, "budget": budget,
                     "hardware": hardware,
                     "recipe": description, "mean": mean, "std": std, "n": len(runs),
                     "higher_is_better": bool(runs[0]["higher_is_better"]),
                     "train_seconds": sum(r["train_seconds"] or 0 for r in runs) / len(runs),
                     "params_M": runs[0]["params_M"], "commit": runs[-1]["commit_id"],
                     "date": (runs[-1]["finished"] or "")[:10], "command": f"zoo run {description}"})
    return rows
