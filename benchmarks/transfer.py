"""Transfer rows: a recipe pretrained on one dataset, fine-tuned on another, against from scratch on the same split.

    python benchmarks/transfer.py --recipe molecules/dmpnn --source data=lipophilicity --target data=freesolv \
        --source-budget 1m --budget 30s --seeds 3 [--finetune lr=3e-4] [--zoo-data ../shared/data] [--record]
    python benchmarks/transfer.py --recipe vision/resnet --source-recipe contrastive/simclr \
        --source data=cifar10-subset --target data=mnist-test --budget 30s --seeds 3
    python benchmarks/transfer.py --recipe tabular/mlp --halves california-housing --source data={half1} \
        --target data={half2} --source-budget 1m --budget 1m --seeds 3 [--zoo-data ../shared/data]

The source is one run (seed 0) of ``zoo run RECIPE SOURCE --budget SOURCE_BUDGET`` (``--source-recipe R``: of
another recipe whose runs RECIPE takes as ``weights=``, e.g. a contrastive/simclr run for vision/resnet). Then, per
seed, three arms on the target, each ``zoo run RECIPE TARGET --seed S`` in a process of its own, one at a time: from
scratch at ``--budget``, fine-tuned (``weights=SOURCE_RUN`` and the ``--finetune`` settings, e.g. a lower LR) at
``--budget``, and from scratch at the same total compute (``--budget`` plus the source's training seconds, or
steps). Prints one JSON line per run, then per arm the validation and test metric by seed with their means, and the
fine-tune's paired validation difference from each scratch arm (sign turned so that positive is better): selection
reads validation; test is reported.

``--record``: the summary, with the hardware and commit the runs name, appended to ``benchmarks/transfer.jsonl``:
the board's transfer table (``zoo board --write``). Like a bench row it must name its code: a clean checkout.

``--halves NAME``: a tabular dataset's rows split in two halves by a seeded permutation (``--halves-seed``), written
as CSV files that ``{half1}`` and ``{half2}`` name in the source and target settings (new rows of the same columns:
``tabular/mlp``'s refit); a medical stack (ISBI 2012) cut at its middle slice into two image/mask folders (the
other slices pretrain, a few of these fine-tune: ``train_cases=``).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cpu_precision import zoo_run  # benchmarks/ is this script's folder
from recipe_zoo import board, runs
from recipe_zoo.core.budget import Budget, parse_budget
from recipe_zoo.core.envinfo import git_state


def total_budget(budget: str, source: dict) -> str:
    """The fine-tune's budget plus the source's work, in the budget's unit: what from scratch at the same total
    compute gets."""
    work = parse_budget(budget)
    if work.kind == "seconds":
        return str(Budget("seconds", round(work.amount + source["train_seconds"])))
    if work.kind == "steps" and source.get("steps"):
        return str(Budget("steps", work.amount + source["steps"]))
    raise SystemExit(f"--budget {budget}: give seconds or steps (the source's work adds in that unit)")


def run(recipe: str, settings: list[str], budget: str, seed: int, out: Path) -> dict:
    summary, run_dir = zoo_run([recipe, *settings, "--budget", budget, "--seed", str(seed)], out)
    base = summary["metric"].removeprefix("test_")
    m = summary["metrics"]
    env = json.loads((run_dir / "env.json").read_text())
    return {"settings": settings, "budget": budget, "seed": seed, "run_dir": str(run_dir),
            "benchmark": summary["benchmark"], "metric": summary["metric"], "higher": summary["higher_is_better"],
            "test": summary["value"], "val": m.get(f"val_{base}"), "val_start": m.get(f"val_{base}_start"),
            "train_seconds": summary.get("train_seconds"), "steps": m.get("steps"), "hardware": env["hardware"],
            "commit": env["commit"] + ("-dirty" if env["dirty"] else "")}


def halves(name: str, seed: int, folder: Path) -> dict[str, str]:
    """``name``'s rows (as ``tabular/*`` read them) in two halves, as CSV files; a medical stack's slices in two
    (``slice_halves``)."""
    import numpy as np

    from recipe_zoo.core import datasets
    from recipe_zoo.recipes.medical import datasets as _medical  # noqa: F401  (declares the medical sets)

    if name in datasets.DATASETS and datasets.get(name).domain == "medical":
        return slice_halves(name, folder)

    from recipe_zoo.recipes.tabular.config import TabularConfig
    from recipe_zoo.recipes.tabular.data import read_frame

    frame = read_frame(TabularConfig(data=name))[0]
    order = np.random.default_rng(seed).permutation(len(frame))
    paths = {}
    for i, rows in enumerate((order[:len(order) // 2], order[len(order) // 2:]), 1):
        paths[f"half{i}"] = str(folder / f"{name}-half{i}.csv")
        frame.iloc[np.sort(rows)].to_csv(paths[f"half{i}"], index=False)
    return paths


def slice_halves(name: str, folder: Path) -> dict[str, str]:
    """A medical stack of numbered slices (``image/N.png`` with ``label/N.png``: ISBI 2012) in two contiguous halves
    of the stack, so that neighbouring slices, nearly alike, stay on one side; each half a folder of links to the
    files, which ``medical/*`` reads as image/mask folders. The seed is not used: the cut is the stack's middle."""
    from recipe_zoo.core import datasets

    root = datasets.locate(name)
    slices = sorted((p.name for p in (root / "image").glob("*.png")), key=lambda n: int(Path(n).stem))
    paths = {}
    for i, part in enumerate((slices[:len(slices) // 2], slices[len(slices) // 2:]), 1):
        paths[f"half{i}"] = str(folder / f"{name}-half{i}")
        for sub in ("image", "label"):
            (folder / f"{name}-half{i}" / sub).mkdir(parents=True)
            for file in part:
                (folder / f"{name}-half{i}" / sub / file).symlink_to(root / sub / file)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--source-recipe", help="the source run's recipe, where it is another (contrastive/simclr "
                                               "for vision/resnet); default: --recipe")
    parser.add_argument("--source", nargs="+", required=True, metavar="KEY=VALUE")
    parser.add_argument("--target", nargs="+", required=True, metavar="KEY=VALUE")
    parser.add_argument("--finetune", nargs="+", default=[], metavar="KEY=VALUE",
                        help="settings of the fine-tuned arm alone (a lower LR)")
    parser.add_argument("--source-budget", default="1m")
    parser.add_argument("--budget", default="30s")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--halves", help="a tabular dataset or a medical stack split in two: {half1} and {half2} in "
                                         "the settings")
    parser.add_argument("--halves-seed", type=int, default=0)
    parser.add_argument("--zoo-data", help="the data cache ($ZOO_DATA)")
    parser.add_argument("--record", action="store_true", help="append the summary to benchmarks/transfer.jsonl")
    args = parser.parse_args()
    if args.zoo_data:
        os.environ["ZOO_DATA"] = str(Path(args.zoo_data).resolve())
    if args.record and git_state(Path(__file__).resolve().parents[1], ignore=runs.RESULT_FILES)[1]:
        raise SystemExit("--record: this checkout has uncommitted changes; a row must name the code that made it")
    os.environ.setdefault("ZOO_BOARD_DIR", tempfile.mkdtemp())  # never rank against or write the real board
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        names = halves(args.halves, args.halves_seed, tmp) if args.halves else {}
        source_settings = [s.format(**names) for s in args.source]
        target = [s.format(**names) for s in args.target]
        shown = {k: f"{args.halves}-{k}" for k in names}  # what a row names for the temporary files
        source = run(args.source_recipe or args.recipe, source_settings, args.source_budget, 0, tmp / "source")
        print(json.dumps({"arm": "source", **source}), flush=True)
        total = total_budget(args.budget, source)
        arms = {"scratch": (target, args.budget),
                "fine-tuned": (target + args.finetune + [f"weights={source['run_dir']}"], args.budget),
                "scratch, same total compute": (target, total)}
        rows = {arm: [] for arm in arms}
        for seed in range(args.seeds):
            for arm, (settings, budget) in arms.items():
                row = run(args.recipe, settings, budget, seed, tmp / arm.replace(" ", "_").replace(",", ""))
                print(json.dumps({"arm": arm, **row}), flush=True)
                rows[arm].append(row)
    scratch = rows["scratch"][0]
    sign = 1 if scratch["higher"] else -1
    report = {"recipe": args.recipe, "source": [s.format(**shown) for s in args.source],
              "source_budget": args.source_budget, "source_benchmark": source["benchmark"],
              "source_val": source["val"], "target": [s.format(**shown) for s in args.target],
              "finetune": args.finetune,
              "benchmark": scratch["benchmark"], "budget": args.budget, "total_budget": total,
              "metric": scratch["metric"], "higher_is_better": scratch["higher"], "n": args.seeds,
              "hardware": scratch["hardware"], "commit": scratch["commit"], "date": time.strftime("%Y-%m-%d"),
              "command": "python benchmarks/transfer.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]
                                                                      if a != "--record"), "arms": {}}
    if args.source_recipe and args.source_recipe != args.recipe:
        report["source_recipe"] = args.source_recipe
    if args.halves:  # the target's table is named by its half, not by the temporary file's content key
        report["halves"] = {"data": args.halves, "seed": args.halves_seed}
        half = next(shown[k] for k in shown if any("{" + k + "}" in t for t in args.target))
        key = scratch["benchmark"].split(":")  # own:CONTENT:settings...: the half's name and the same settings
        report["benchmark"] = ":".join([half, *key[2:]] if key[0] == "own" else [half, *key[1:]])
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
    if args.record:  # the data cache's folder as the variable a reader sets, not this machine's path
        cache = os.environ.get("ZOO_DATA")
        report = json.loads(json.dumps(report).replace(cache, "$ZOO_DATA")) if cache else report
        board.append_rows([report], Path(__file__).with_name("transfer.jsonl"))


if __name__ == "__main__":
    main()
