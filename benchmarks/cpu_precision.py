"""fp32 against bf16 autocast on this CPU, per recipe: speed, and validation at two budgets with seeds paired; or any
other two settings of one lever (``--compare compile=false compile=true``; a setting of several overrides is one
argument: ``--compare precision=fp32 "precision=bf16 compile=false"``).

    python benchmarks/cpu_precision.py --recipes vision/resnet llm/gpt --budgets 30s 90s --seeds 3 \
        [--zoo-data ../shared/data] [--set RECIPE:KEY=VALUE ...] [--compare A=x A=y [--speedup 1.1]]

Each run is ``zoo run RECIPE --budget B --seed S SETTING`` on the recipe's benchmark (``data=`` in ``--set``
chooses other data) in a process of its own, one at a time, the two settings'
runs of one seed and budget back to back (a neighbour's load falls on both). Prints one JSON line per run, then
per recipe: median samples/s (tokens/s for the LLMs, steps/s where a recipe reports neither) of each setting and
their ratio, and per budget the paired validation difference (the second minus the first, sign turned so that
positive is better) with its values by seed.

The rule ``precision=auto`` encodes on CPUs (a recipe's ``cpu_precision``): bf16 when its steps are at least 1.3x
faster and its mean paired validation difference is not negative at either budget; otherwise fp32. Another lever
is kept by the same rule at ``--speedup`` (issue 44: 1.1, at least 10% faster).
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


def zoo(args: list[str]) -> subprocess.CompletedProcess:
    """``zoo ARGS`` from this checkout (``python -m zoo`` with it first on ``PYTHONPATH``, even where another copy
    is installed), in a process of its own; the command and its stderr's end on failure."""
    return python(["-m", "zoo", *args])


def python(args: list[str]) -> subprocess.CompletedProcess:
    """``python ARGS`` with this checkout first on ``PYTHONPATH``; the command and its stderr's end on failure."""
    cmd = [sys.executable, *args]
    checkout = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc


def zoo_run(args: list[str], out: Path) -> tuple[dict, Path]:
    """``zoo run ARGS --out OUT`` (the benchmarks' runs: this one's, cpu_plan_check.py's, transfer.py's): its
    summary and run folder, the newest under OUT."""
    zoo(["run", *args, "--out", str(out)])
    path = max(out.rglob("summary.json"), key=os.path.getmtime)
    return json.loads(path.read_text()), path.parent


def benchmark_data(recipe: str) -> list[str]:
    """The recipe's benchmark as overrides (``data=NAME``, and ``KEY=VALUE`` for a non-default split): a recipe's
    default data is not always its benchmark (medical's is synthetic-2d, diffusion's digits), and a speed or a
    validation gain measured there is not the benchmark's."""
    line = next(t for t in zoo(["show", recipe]).stdout.splitlines() if t.startswith("benchmark:"))
    name, *split = line.split()[1].split(":")
    return [f"data={name}", *split]


def run(recipe: str, budget: str, seed: int, setting: str, extra: list[str], out: Path) -> dict:
    summary, _ = zoo_run([recipe, "--budget", budget, "--seed", str(seed), *setting.split(), *extra], out)
    m = summary["metrics"]
    base = summary["metric"].removeprefix("test_").removeprefix("val_")
    return {"recipe": recipe, "budget": budget, "seed": seed, "setting": setting, "overrides": extra,
            "rate": m.get("tokens_per_s") or m.get("samples_per_s") or m["steps"] / m["train_seconds"],  # else steps/s
            "steps": m.get("steps"),
            "val": m.get(f"val_{base}"), "test": summary["value"], "metric": summary["metric"],
            "higher": summary["higher_is_better"], "mfu": summary.get("mfu_percent"), "params": summary.get("params_M"),
            "mfu_of": summary.get("extra", {}).get("mfu_of")}


def model_flops(row: dict) -> float | None:
    """The model FLOP/s a run reached: its MFU times the peak its ``mfu_of`` names ("361 GFLOP/s, a bf16 ...")."""
    if not row.get("mfu") or not row.get("mfu_of"):
        return None
    value, unit = row["mfu_of"].split()[:2]
    return row["mfu"] / 100 * float(value.replace(",", "")) * {"GFLOP/s,": 1e9, "TFLOP/s,": 1e12}.get(unit, 1.0)


def report(rows: list[dict], settings: tuple[str, str], speedup: float) -> dict:
    """The recipe's figures and the choice the rule makes from them: the second setting where its steps are at
    least ``speedup`` times faster and its paired validation is no worse at any budget, else the first. Where the
    two settings train different shapes (a sizing rule that reads the precision's peak), samples/s compare unlike
    steps: the speed-up is then that of model FLOP/s (MFU times the peak it is of)."""
    a, b = settings
    rate = {s: statistics.median(r["rate"] for r in rows if r["setting"] == s) for s in settings}
    flops = {s: [f for r in rows if r["setting"] == s and (f := model_flops(r))] for s in settings}
    same_work = len({(r["params"], r["budget"]) for r in rows}) == len({r["budget"] for r in rows})
    out = {"recipe": rows[0]["recipe"], "settings": list(settings), "rates": [rate[a], rate[b]],
           "speedup": rate[b] / rate[a], "budgets": {}}
    if not same_work and flops[a] and flops[b]:
        out["model_flops"] = [statistics.median(flops[a]), statistics.median(flops[b])]
        out["speedup"] = out["model_flops"][1] / out["model_flops"][0]
    sign = 1 if rows[0]["higher"] else -1
    for budget in dict.fromkeys(r["budget"] for r in rows):
        pairs = {}
        for r in rows:
            if r["budget"] == budget:
                pairs.setdefault(r["seed"], {})[r["setting"]] = r
        diffs = [sign * (p[b]["val"] - p[a]["val"]) for p in pairs.values()]
        out["budgets"][budget] = {
            "val": [[p[s]["val"] for p in pairs.values()] for s in settings],
            "test": [[p[s]["test"] for p in pairs.values()] for s in settings],
            "steps": [[p[s]["steps"] for p in pairs.values()] for s in settings],
            "mean_val_gain": statistics.fmean(diffs), "val_gains": diffs}
    out["choice"] = b if out["speedup"] >= speedup and all(
        g["mean_val_gain"] >= 0 for g in out["budgets"].values()) else a
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", nargs="+", required=True)
    parser.add_argument("--budgets", nargs="+", default=["30s", "90s"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--zoo-data", help="the data cache ($ZOO_DATA)")
    parser.add_argument("--set", nargs="*", default=[], metavar="RECIPE:KEY=VALUE",
                        help="an override for one recipe, e.g. llm/gpt:depth=4")
    parser.add_argument("--compare", nargs=2, default=["precision=fp32", "precision=bf16"], metavar="KEY=VALUE",
                        help="the two settings compared (default: fp32 against bf16)")
    parser.add_argument("--speedup", type=float, default=SPEEDUP, help="the speed-up the second setting must reach")
    args = parser.parse_args()
    if args.zoo_data:
        os.environ["ZOO_DATA"] = str(Path(args.zoo_data).resolve())
    os.environ.setdefault("ZOO_BOARD_DIR", tempfile.mkdtemp())  # never rank against or write the real board
    for recipe in args.recipes:
        extra = [s.split(":", 1)[1] for s in args.set if s.split(":", 1)[0] == recipe]
        if not any(e.startswith("data=") for e in extra):  # the benchmark, not the recipe's default data
            extra = benchmark_data(recipe) + extra
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for budget in args.budgets:
                for seed in range(args.seeds):
                    for setting in args.compare:
                        row = run(recipe, budget, seed, setting, extra, Path(tmp) / "runs")
                        print(json.dumps(row), flush=True)
                        rows.append(row)
        print(json.dumps({"summary": report(rows, tuple(args.compare), args.speedup)}), flush=True)


if __name__ == "__main__":
    main()
