"""fp32 against bf16 autocast on this CPU, per recipe: speed, and validation at two budgets with seeds paired.

    python benchmarks/cpu_precision.py --recipes vision/resnet llm/gpt --budgets 30s 90s --seeds 3 \
        [--zoo-data ../shared/data] [--set KEY=VALUE ...]

Each run is ``zoo run RECIPE --budget B --seed S precision=P`` in a process of its own, one at a time, the fp32 and
bf16 runs of one seed and budget back to back (a neighbour's load falls on both). Prints one JSON line per run, then
per recipe: median samples/s (tokens/s for the LLMs) of each precision and their ratio, and per budget the paired
validation difference (bf16 minus fp32, sign turned so that positive is better) with its values by seed.

The rule ``precision=auto`` encodes on CPUs (a recipe's ``cpu_precision``): bf16 when its steps are at least 1.3x
faster and its mean paired validation difference is not negative at either budget; otherwise fp32.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SPEEDUP = 1.3


def run(recipe: str, budget: str, seed: int, precision: str, extra: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "recipe_zoo", "run", recipe, "--budget", budget, "--seed", str(seed),
           f"precision={precision}", *extra, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    summary = json.loads(max(out.rglob("summary.json"), key=os.path.getmtime).read_text())
    m = summary["metrics"]
    base = summary["metric"].removeprefix("test_").removeprefix("val_")
    return {"recipe": recipe, "budget": budget, "seed": seed, "precision": precision,
            "rate": m.get("tokens_per_s") or m.get("samples_per_s"), "steps": m.get("steps"),
            "val": m.get(f"val_{base}"), "test": summary["value"], "metric": summary["metric"],
            "higher": summary["higher_is_better"], "mfu": summary.get("mfu_percent"),
            "mfu_of": summary.get("extra", {}).get("mfu_of")}


def report(rows: list[dict]) -> dict:
    """The recipe's figures and the choice the rule makes from them."""
    rate = {p: statistics.median(r["rate"] for r in rows if r["precision"] == p) for p in ("fp32", "bf16")}
    out = {"recipe": rows[0]["recipe"], "fp32_rate": rate["fp32"], "bf16_rate": rate["bf16"],
           "speedup": rate["bf16"] / rate["fp32"], "budgets": {}}
    sign = 1 if rows[0]["higher"] else -1
    for budget in dict.fromkeys(r["budget"] for r in rows):
        pairs = {}
        for r in rows:
            if r["budget"] == budget:
                pairs.setdefault(r["seed"], {})[r["precision"]] = r
        diffs = [sign * (p["bf16"]["val"] - p["fp32"]["val"]) for p in pairs.values()]
        out["budgets"][budget] = {
            "val_fp32": [p["fp32"]["val"] for p in pairs.values()], "val_bf16": [p["bf16"]["val"] for p in pairs.values()],
            "test_fp32": [p["fp32"]["test"] for p in pairs.values()], "test_bf16": [p["bf16"]["test"] for p in pairs.values()],
            "mean_val_gain": statistics.fmean(diffs), "val_gains": diffs}
    out["choice"] = "bf16" if out["speedup"] >= SPEEDUP and all(
        b["mean_val_gain"] >= 0 for b in out["budgets"].values()) else "fp32"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", nargs="+", required=True)
    parser.add_argument("--budgets", nargs="+", default=["30s", "90s"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--zoo-data", help="the data cache ($ZOO_DATA)")
    parser.add_argument("--set", nargs="*", default=[], metavar="RECIPE:KEY=VALUE",
                        help="an override for one recipe, e.g. llm/gpt:depth=4")
    args = parser.parse_args()
    if args.zoo_data:
        os.environ["ZOO_DATA"] = str(Path(args.zoo_data).resolve())
    os.environ.setdefault("ZOO_BOARD_DIR", tempfile.mkdtemp())  # never rank against or write the real board
    for recipe in args.recipes:
        extra = [s.split(":", 1)[1] for s in args.set if s.split(":", 1)[0] == recipe]
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for budget in args.budgets:
                for seed in range(args.seeds):
                    for precision in ("fp32", "bf16"):
                        row = run(recipe, budget, seed, precision, extra, Path(tmp) / "runs")
                        print(json.dumps(row), flush=True)
                        rows.append(row)
        print(json.dumps({"summary": report(rows)}), flush=True)


if __name__ == "__main__":
    main()
