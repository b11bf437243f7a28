"""Transfer rows: a recipe pretrained on one dataset, fine-tuned on another, against from scratch on the same split.

    python benchmarks/transfer.py --recipe molecules/dmpnn --source data=lipophilicity --target data=freesolv \
        --source-budget 1m --budget 30s --seeds 3 [--zoo-data ../shared/data]
    python benchmarks/transfer.py --recipe tabular/mlp --halves california-housing --source data={half1} \
        --target data={half2} --source-budget 1m --budget 1m --seeds 3 [--zoo-data ../shared/data]

The source is one run (seed 0) of ``zoo run RECIPE SOURCE --budget SOURCE_BUDGET``. Then, per seed, three arms on
the target, each ``zoo run RECIPE TARGET --seed S`` in a process of its own, one at a time: from scratch at
``--budget``, fine-tuned (``weights=SOURCE_RUN``) at ``--budget``, and from scratch at the same total compute
(``--budget`` plus the source's training seconds). Prints one JSON line per run, then per arm the validation and test
metric by seed with their means, and the fine-tune's paired validation difference from each scratch arm (sign turned
so that positive is better): selection reads validation; test is reported.

``--halves NAME``: a tabular dataset's rows split in two halves by a seeded permutation (``--halves-seed``), written
as CSV files that ``{half1}`` and ``{half2}`` name in the source and target settings (new rows of the same columns:
``tabular/mlp``'s refit).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from cpu_precision import zoo_run  # benchmarks/ is this script's folder


def seconds(budget: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(budget[:-1]) * units[budget[-1]]


def run(recipe: str, settings: list[str], budget: str, seed: int, out: Path) -> dict:
    summary, run_dir = zoo_run([recipe, *settings, "--budget", budget, "--seed", str(seed)], out)
    base = summary["metric"].removeprefix("test_")
    m = summary["metrics"]
    return {"settings": settings, "budget": budget, "seed": seed, "run_dir": str(run_dir),
            "metric": summary["metric"], "higher": summary["higher_is_better"], "test": summary["value"],
            "val": m.get(f"val_{base}"), "val_start": m.get(f"val_{base}_start"),
            "train_seconds": summary.get("train_seconds")}


def halves(name: str, seed: int, folder: Path) -> dict[str, str]:
    """``name``'s rows (as ``tabular/*`` read them) in two halves, as CSV files."""
    import numpy as np

    from recipe_zoo.recipes.tabular.config import TabularConfig
    from recipe_zoo.recipes.tabular.data import read_frame

    frame = read_frame(TabularConfig(data=name))[0]
    order = np.random.default_rng(seed).permutation(len(frame))
    paths = {}
    for i, rows in enumerate((order[:len(order) // 2], order[len(order) // 2:]), 1):
        paths[f"half{i}"] = str(folder / f"{name}-half{i}.csv")
        frame.iloc[np.sort(rows)].to_csv(paths[f"half{i}"], index=False)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--source", nargs="+", required=True, metavar="KEY=VALUE")
    parser.add_argument("--target", nargs="+", required=True, metavar="KEY=VALUE")
    parser.add_argument("--source-budget", default="1m")
    parser.add_argument("--budget", default="30s")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--halves", help="a tabular dataset split in two: {half1} and {half2} in the settings")
    parser.add_argument("--halves-seed", type=int, default=0)
    parser.add_argument("--zoo-data", help="the data cache ($ZOO_DATA)")
    args = parser.parse_args()
    if args.zoo_data:
        os.environ["ZOO_DATA"] = str(Path(args.zoo_data).resolve())
    os.environ.setdefault("ZOO_BOARD_DIR", tempfile.mkdtemp())  # never rank against or write the real board
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        names = halves(args.halves, args.halves_seed, tmp) if args.halves else {}
        source_settings = [s.format(**names) for s in args.source]
        target = [s.format(**names) for s in args.target]
        source = run(args.recipe, source_settings, args.source_budget, 0, tmp / "source")
        print(json.dumps({"arm": "source", **source}), flush=True)
        total = f"{seconds(args.budget) + source['train_seconds']:.0f}s"
        arms = {"scratch": (target, args.budget), "fine-tuned": (target + [f"weights={source['run_dir']}"],
                                                               args.budget),
                "scratch, same total compute": (target, total)}
        rows = {arm: [] for arm in arms}
        for seed in range(args.seeds):
            for arm, (settings, budget) in arms.items():
                row = run(args.recipe, settings, budget, seed, tmp / arm.replace(" ", "_").replace(",", ""))
                print(json.dumps({"arm": arm, **row}), flush=True)
                rows[arm].append(row)
    sign = 1 if source["higher"] else -1
    report = {"recipe": args.recipe, "source": source_settings, "source_budget": args.source_budget,
              "source_val": source["val"], "target": target, "budget": args.budget, "total_budget": total,
              "metric": source["metric"], "arms": {}}
    for arm, found in rows.items():
        report["arms"][arm] = {"val": [r["val"] for r in found], "test": [r["test"] for r in found],
                               "val_mean": statistics.fmean(r["val"] for r in found),
                               "test_mean": statistics.fmean(r["test"] for r in found)}
    report["arms"]["fine-tuned"]["val_start"] = [r["val_start"] for r in rows["fine-tuned"]]
    for arm in ("scratch", "scratch, same total compute"):
        gains = [sign * (f["val"] - s["val"]) for f, s in zip(rows["fine-tuned"], rows[arm])]
        report[f"val_gain_over_{arm.replace(' ', '_').replace(',', '')}"] = {"mean": statistics.fmean(gains),
                                                                               "by_seed": gains}
    print(json.dumps({"summary": report}), flush=True)


if __name__ == "__main__":
    main()
