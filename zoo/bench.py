"""``zoo bench``: run recipes on their benchmark for n seeds and append one leaderboard row each."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from recipe_zoo import board, board_render, config, execution, paired, runs
from recipe_zoo.core.errors import ZooError


def bench_one(spec, *, seeds: int, budget_text: str | None, overrides: list[str], out_root: Path,
              command: str, log=print, append: bool = True, speed_only: bool = False) -> dict | None:
    """Returns the row (appended to the board unless ``append`` is off; at a budget of work, its speed row too), or
    None when a seed did not finish ``ok`` (then nothing is written). ``speed_only``: the speed row alone, never a
    quality row. Under torchrun every rank trains each seed and rank 0 writes the row."""
    from recipe_zoo.core import distributed

    budget = runs.parse_budget_arg(budget_text or spec.budget)
    outcomes = run_seeds(spec, seeds=seeds, budget=budget, overrides=overrides, out_root=out_root, log=log)
    if outcomes is None or not distributed.is_main():
        return None
    row = make_row(spec.name, outcomes, budget=budget, overrides=overrides, command=command)
    if append and not speed_only:
        line = paired.items_line([o.run_dir for o in outcomes])  # the seeds' per-item test scores, first: a row
        if line is not None:  # never names scores that are not there
            row["items"] = line["id"]
            board.append_rows([line], board.items_file())
        board.append_rows([row])
    if append and board.fixed_work(row["budget"]):
        board.append_rows([speed_row(row, outcomes)], board.speed_file())
    return row


def speed_row(row: dict, outcomes: list) -> dict:
    """How fast this machine did the row's work: median training seconds, throughput and MFU over the seeds (the
    speed view beside a fixed-work table; it holds no quality)."""
    summaries = [json.loads((o.run_dir / "summary.json").read_text()) for o in outcomes]

    def median(values):
        values = [v for v in values if isinstance(v, (int, float)) and v == v]
        return statistics.median(values) if values else None

    unit = "tokens/s" if any("tokens_per_s" in s["metrics"] for s in summaries) else "samples/s"
    key = "tokens_per_s" if unit == "tokens/s" else "samples_per_s"
    return {"benchmark": row["benchmark"], "recipe": row["recipe"], "overrides": row["overrides"],
            "budget": row["budget"], "precision": row["precision"], "hardware": row["hardware"], "n": row["n"],
            "train_seconds": median(s["train_seconds"] for s in summaries),
            "throughput": median(s["metrics"].get(key) for s in summaries), "unit": unit,
            "mfu_percent": median(s.get("mfu_percent") for s in summaries),
            "mfu_of": summaries[0]["extra"].get("mfu_of"), "commit": row["commit"], "dirty": row["dirty"],
            "date": row["date"], "command": row["command"], "config": row["config"], "config_hash": row["config_hash"]}


def run_seeds(spec, *, seeds: int, budget, overrides: list[str], out_root: Path, log=print,
              device: str = "auto") -> list | None:
    """Seeds 0..n-1 of ``spec`` on its benchmark (``data=`` may override it): their outcomes, or None when one did
    not finish ``ok`` (the seeds after it are not run)."""
    from recipe_zoo.core import distributed

    data = [f"data={spec.benchmark}"] if "data" in spec.config.__dataclass_fields__ else []
    cfg = config.build(spec.config, spec.defaults, None, data + overrides, spec.name)
    outcomes = []
    for seed in range(seeds):
        outcome = execution.execute(spec, cfg, budget=budget, seed=seed, out_root=out_root, device=device,
                               description=" ".join([spec.name, *overrides]))
        outcomes.append(outcome)
        if outcome.code != execution.EXIT_OK:
            if distributed.is_main():
                log(f"{spec.name} seed {seed} ended {outcome.summary['status']}: no leaderboard row written")
            return None
    return outcomes


def make_row(recipe: str, outcomes: list, *, budget, overrides: list[str], command: str) -> dict:
    """The leaderboard row of finished seeds: mean ± std on test, the validation mean, the provenance."""
    from recipe_zoo import data, references

    env = json.loads((outcomes[0].run_dir / "env.json").read_text())
    trained = runs.load_run_config(outcomes[0].run_dir)["config"]  # resolved: precision=auto as it resolved
    values = [o.summary["value"] for o in outcomes]
    mean, std = board.mean_std(values)
    summaries = [json.loads((o.run_dir / "summary.json").read_text()) for o in outcomes]
    benchmark, metric = summaries[0]["benchmark"], summaries[0]["metric"]
    info = data.load_all().get(benchmark.split(":")[0])
    measured = [s["metrics"] for s in summaries]
    val_key = "val_" + board.metric_base(metric)
    return {
        "protocol": board.PROTOCOL,
        "benchmark": benchmark, "metric": metric,
        "split": summaries[0]["extra"].get("split") or (info.split if info else ""),  # what the run says it used
        "precision": summaries[0]["extra"].get("precision"),  # what precision=auto resolved to (None: no such field)
        "val_mean": _mean(m.get(val_key) for m in measured),
        "ci_low": _mean(m.get(f"{metric}_ci_low") for m in measured),
        "ci_high": _mean(m.get(f"{metric}_ci_high") for m in measured),
        "higher_is_better": summaries[0]["higher_is_better"], "recipe": recipe,
        "overrides": config.parse_overrides(overrides), "mean": mean, "std": std, "n": len(values),
        "values": values, "seeds": list(range(len(outcomes))), "budget": str(budget),
        "train_seconds": sum(s["train_seconds"] for s in summaries) / len(summaries),
        "params_M": summaries[0]["params_M"],
        "peak_mem_mb": max((s["peak_mem_mb"] for s in summaries if s["peak_mem_mb"] is not None), default=None),
        "hardware": env["hardware"], "commit": env["commit"] + ("-dirty" if env["dirty"] else ""),
        "dirty": bool(env["dirty"]), "inputs": summaries[0].get("inputs", {}),
        "date": time.strftime("%Y-%m-%d"), "command": command,
        "config": trained, "config_hash": references.hash_config(recipe, str(budget), trained),
    }


def _mean(values) -> float | None:
    """The mean of the seeds' values, or None when a seed lacks it (a protocol-1 recipe, a metric without one)."""
    values = list(values)
    return None if not values or any(v is None for v in values) else statistics.fmean(values)


def check_provenance(allow_dirty: bool) -> None:
    """A row must name the code that made it: a committed checkout, an installed package's version, or
    --allow-dirty (which the row records)."""
    commit, dirty = runs.code_state()
    if allow_dirty:
        return
    if commit == "unknown":
        raise ZooError(f"{runs.CODE_DIR} is not a git checkout, so a row could not name its commit; bench from a "
                       "checkout, or pass --allow-dirty (the row records it)")
    if dirty:
        raise ZooError(f"{runs.CODE_DIR}: uncommitted changes (git status); a row must name the code that made it: "
                       "commit them, or pass --allow-dirty (the row records it)")


def bench(jobs: list[tuple], *, seeds: int, out_root: Path, allow_dirty: bool = False, speed_only: bool = False) -> int:
    """``jobs``: (recipe spec, the command line that reproduces its row, its overrides, its budget or None for the
    recipe's). ``speed_only``: each job adds its speed row, no quality row."""
    from recipe_zoo.core import distributed

    if seeds < 1:
        raise ZooError("--seeds must be at least 1")
    check_provenance(allow_dirty)
    board.check_whole()  # the board is rendered again at the end: refuse now, not after the training
    written = []
    for spec, command, overrides, budget_text in jobs:
        row = bench_one(spec, seeds=seeds, budget_text=budget_text, overrides=overrides, out_root=out_root,
                        command=command, speed_only=speed_only)
        if row is not None:
            written.append(row)
    if not distributed.is_main():
        return 0
    written_board = board_render.write_board()
    charts = board_render.write_charts()
    where = board.speed_file() if speed_only else board.rows_file()
    print(f"\nbench results (appended to {where}; {written_board} and {len(charts)} charts rewritten):")
    for r in written:
        print(f"  {board.label(r):<40} {r['benchmark']:<16} {r['metric']} {board.value_text(r)} "
              f"(n={r['n']}, {r['budget']}, {r['hardware']})")
    return 0 if len(written) == len(jobs) else 1
