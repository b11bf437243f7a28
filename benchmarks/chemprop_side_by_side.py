"""chemprop v2 with its defaults on exactly our splits, timed, for the molecules closing note.

chemprop is never our dependency: install it in a throwaway environment and pass its CLI::

    python -m venv /tmp/cpvenv && /tmp/cpvenv/bin/pip install chemprop
    ZOO_DATA=../shared/data python benchmarks/chemprop_side_by_side.py --chemprop /tmp/cpvenv/bin/chemprop \
        --data esol --split random --seeds 0 1 2

For each seed it writes the dataset with a ``split`` column holding our train/val/test assignment
(``recipes.molecules.splits.split_indices``), runs ``chemprop train`` on it, and scores chemprop's test
predictions with our metric code. Prints one line per seed and the mean ± std.
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recipe_zoo.core.metrics import score_tasks  # noqa: E402
from recipe_zoo.recipes.molecules.config import MolConfig  # noqa: E402
from recipe_zoo.recipes.molecules.scoring import METRIC_NAMES, SCORE_TASK  # noqa: E402
from recipe_zoo.recipes.molecules.splits import parse_sizes, split_indices  # noqa: E402
from recipe_zoo.recipes.molecules.table import read_table  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chemprop", required=True, help="path of the chemprop CLI in its own environment")
    p.add_argument("--data", default="esol")
    p.add_argument("--split", default="random", choices=["random", "scaffold"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args()
    cfg = MolConfig(data=args.data, split=args.split)
    table = read_table(cfg)
    task = "regression" if table.task == "regression" else "classification"
    scores = []
    for seed in args.seeds:
        train, val, test = split_indices(table.mols, args.split, parse_sizes(cfg.split_sizes), seed)
        part = {**{i: "train" for i in train}, **{i: "val" for i in val}, **{i: "test" for i in test}}
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data.csv"
            with open(data, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["smiles", "target", "split"])
                for i, s in enumerate(table.smiles):
                    w.writerow([s, table.y[i, 0], part[i]])
            start = time.perf_counter()
            proc = subprocess.run([args.chemprop, "train", "--data-path", str(data), "-s", "smiles",
                                   "--target-columns", "target", "--splits-column", "split", "-t", task,
                                   "--pytorch-seed", str(seed), "-o", str(Path(tmp) / "out"),
                                   "--accelerator", "cpu"], capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if proc.returncode != 0:
                print(proc.stderr[-3000:])
                return 1
            preds = next((Path(tmp) / "out").rglob("test_predictions.csv"))
            with open(preds) as f:
                rows = list(csv.DictReader(f))
        test = np.sort(test)  # chemprop keeps the file's row order within a split
        if [r["smiles"] for r in rows] != [table.smiles[i] for i in test]:
            raise SystemExit("chemprop's test rows do not line up with our test split")
        pred = np.array([float(r["target"]) for r in rows])[:, None]
        result = score_tasks(table.y[test], pred, SCORE_TASK[table.task], METRIC_NAMES[table.task])
        metric = "rmse" if table.task == "regression" else "roc_auc"
        scores.append(result[metric])
        print(f"seed {seed}: test {metric} {result[metric]:.4f} in {seconds:.0f} s wall "
              f"({len(train)}/{len(val)}/{len(test)} molecules)", flush=True)
    spread = np.std(scores, ddof=1) if len(scores) > 1 else 0.0
    print(f"chemprop {args.data} {args.split}: {np.mean(scores):.4f} ± {spread:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
