"""``zoo bench``: run recipes on their benchmark for n seeds and append one leaderboard row each."""
from __future__ import annotations

import json
import time
from pathlib import Path

from recipe_zoo import board, config, runs
from recipe_zoo.core.errors import ZooError


def bench_one(spec, *, seeds: int, budget_text: str | None, overrides: list[str], out_root: Path,
              command: str, log=print) -> dict | None:
    """Returns the appended row, or None when a seed did not finish ``ok`` (then nothing is written).
    Under torchrun every rank trains each seed and rank 0 writes the row."""
    from recipe_zoo.core import distributed
    from recipe_zoo.data import DATASETS

    data = [f"data={spec.benchmark}"] if "data" in spec.config.__dataclass_fields__ else []
    cfg = config.build(spec.config, spec.defaults, None, data + overrides, spec.name)
    budget = runs.parse_budget_arg(budget_text or spec.budget)
    outcomes = []
    for seed in range(seeds):
        outcome = runs.execute(spec, cfg, budget=budget, seed=seed, out_root=out_root,
                               description=" ".join([spec.name, *overrides]))
        outcomes.append(outcome)
        if outcome.code != runs.EXIT_OK:
            if distributed.is_main():
                log(f"{spec.name} seed {seed} ended {outcome.summary['status']}: no leaderboard row written")
            return None
    if not distributed.is_main():
        return None
    env = json.loads((outcomes[0].run_dir / "env.json").read_text())
    values = [o.summary["value"] for o in outcomes]
    mean, std = board.mean_std(values)
    summaries = [o.summary for o in outcomes]
    benchmark = summaries[0]["benchmark"]
    info = DATASETS.get(benchmark.split(":")[0])
    row = {
        "benchmark": benchmark, "split": info.split if info else "", "metric": summaries[0]["metric"],
        "higher_is_better": summaries[0]["higher_is_better"], "recipe": spec.name,
        "overrides": config.parse_overrides(overrides), "mean": mean, "std": std, "n": len(values),
        "values": values, "seeds": list(range(seeds)), "budget": str(budget),
        "train_seconds": sum(s["train_seconds"] for s in summaries) / len(summaries),
        "params_M": summaries[0]["params_M"],
        "peak_mem_mb": max((s["peak_mem_mb"] for s in summaries if s["peak_mem_mb"] is not None), default=None),
        "hardware": env["hardware"], "commit": env["commit"] + ("-dirty" if env["dirty"] else ""),
        "date": time.strftime("%Y-%m-%d"), "command": command,
    }
    board.append_rows([row])
    return row


def bench(jobs: list[tuple], *, seeds: int, budget_text: str | None, overrides: list[str], out_root: Path) -> int:
    """``jobs``: (recipe spec, the command line that reproduces its row)."""
    from recipe_zoo.core import distributed

    if seeds < 1:
        raise ZooError("--seeds must be at least 1")
    written = []
    for spec, command in jobs:
        row = bench_one(spec, seeds=seeds, budget_text=budget_text, overrides=overrides, out_root=out_root,
                        command=command)
        if row is not None:
            written.append(row)
    if not distributed.is_main():
        return 0
    board.write_board()
    print("\nbench results (appended to benchmarks/results.jsonl, leaderboard.md rewritten):")
    for r in written:
        print(f"  {board.label(r):<40} {r['benchmark']:<16} {r['metric']} {r['mean']:.4f} ± {r['std']:.4f} "
              f"(n={r['n']}, {r['budget']}, {r['hardware']})")
    return 0 if len(written) == len(jobs) else 1
