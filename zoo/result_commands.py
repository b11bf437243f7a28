"""The commands that read results: ``zoo runs`` (the local results index), ``zoo board`` (the leaderboard printed,
written or charted, or the ranking of your own runs on one file or folder) and ``zoo compare`` (finished runs
against the leaderboard and against each other)."""
from __future__ import annotations

import sys
from pathlib import Path

from recipe_zoo.catalog import run_spec
from recipe_zoo.core.errors import ZooError


def cmd_runs(args) -> int:
    from recipe_zoo import results, runs

    rows = results.all_rows(runs.index_path(args.out or runs.default_out()))
    if args.tsv:
        sys.stdout.write(results.to_tsv(rows))
        return 0
    print(f"{'run_id':<23} {'recipe':<18} {'benchmark':<16} {'metric':<10} {'value':>8} {'status':<11} budget")
    for r in rows:
        value = "" if r["metric"] is None else f"{r['metric']:.4f}"
        print(f"{r['run_id']:<23} {r['recipe']:<18} {r['benchmark']:<16} {r['metric_name']:<10} {value:>8} "
              f"{r['status']:<11} {r['budget']}")
    return 0


def cmd_board(args) -> int:
    from recipe_zoo import board, board_render

    if args.data is not None:
        return _own_data_board(args)
    if args.write:
        print(f"wrote {board_render.write_board()}")
    if args.plot:
        for path in board_render.write_charts():
            print(f"wrote {path}")
    if not (args.write or args.plot):
        sys.stdout.write(board_render.render(*(board.all_rows(kind) for kind in board.KINDS)))
    return 0


def _own_data_board(args) -> int:
    """``zoo board --data PATH``: every run on that file or folder in the local index, one table per key (its
    target, split and other key fields, then budget and hardware), each ranked."""
    from recipe_zoo import board_render, ranking, runs
    from recipe_zoo.core.datasets import own_data_key

    if not args.data.exists():
        raise ZooError(f"{args.data}: file or folder not found")
    key = own_data_key(args.data)
    rows = ranking.local_board_rows(runs.index_path(args.out or runs.default_out()), key, keyed=True)
    print(f"runs on {args.data} ({key}):\n")
    print(board_render.render_tables(rows) if rows else "no finished runs on this data yet")
    return 0


def cmd_compare(args) -> int:
    from recipe_zoo import ranking, runs

    plot = _plot_path(args.plot) if getattr(args, "plot", None) is not None else None
    entries = [_finished_run(run_dir) for run_dir in args.run_dirs]
    for run_dir, summary, hardware, higher in entries:
        if summary["status"] != "ok":
            print(f"{run_dir}: status {summary['status']}, nothing to rank")
            continue
        index = runs.index_path(runs.runs_root(run_dir, summary["recipe"]))
        print(f"{run_dir}: {summary['metric']} {summary['value']:.4f} -> "
              f"{ranking.standing(summary, hardware, higher, index, run_dir.name, run_dir)}")
    groups = _comparable_groups(entries)
    for (bench, metric, budget, hardware), members in groups.items():
        if len(members) < 2:
            continue
        higher = members[0][2]
        members.sort(key=lambda m: -m[1]["value"] if higher else m[1]["value"])
        best = members[0][1]["value"]
        print(f"\n{bench} · {metric} · {budget} · {hardware}:")
        for i, (run_dir, summary, _) in enumerate(members, 1):
            print(f"  {i}. {summary['value']:.4f} ({summary['value'] - best:+.4f})  {summary['recipe']} seed "
                  f"{summary['seed']}  {run_dir}")
    if len(entries) > 1 and len(groups) > 1:
        print("\nruns on different benchmarks or budgets, time budgets on other hardware, or work in another precision "
              "are listed apart: they are not comparable")
    if plot is not None:
        _compare_plot([(run_dir, summary) for run_dir, summary, *_ in entries], plot)
    return 0


def _plot_path(path: Path) -> Path:
    """``--plot``'s path, checked before any run is read: a PNG in a folder that exists."""
    if path.suffix.lower() != ".png":
        raise ZooError(f"--plot {path}: the picture is written as PNG; give a path ending in .png")
    if not path.parent.is_dir():
        raise ZooError(f"--plot {path}: folder {path.parent} not found")
    return path


def _compare_plot(entries: list[tuple], path: Path) -> None:
    """The runs' curves on one picture (plots.plot_compare), each named by the settings that differ between them."""
    from recipe_zoo import plots, runs

    labels = run_labels([runs.load_run_config(run_dir) for run_dir, _ in entries], [d.name for d, _ in entries])
    def rows(path: Path) -> list[dict]:  # none where the recipe wrote none (tabular/xgb)
        return runs.read_csv(path) if path.is_file() else []

    curves = [{"label": label, "metric": summary["metric"], "train": rows(run_dir / "train.csv"),
               "eval": rows(run_dir / "metrics.csv")} for (run_dir, summary), label in zip(entries, labels)]
    if not any(c["train"] or c["eval"] for c in curves):
        raise ZooError(f"--plot {path}: none of the runs recorded curves (train.csv, metrics.csv) to draw")
    what = sorted({f"{s['recipe']} on {s['benchmark']}" for _, s in entries})
    plots.plot_compare(curves, path, f"{len(entries)} runs: {', '.join(what) if len(what) <= 3 else 'several recipes'}")
    print(f"\nwrote {path}")


def run_labels(configs: list[dict], names: list[str], most: int = 4) -> list[str]:
    """Each run's label: the recipe and the config keys, budget and seed whose values differ between the runs
    (``key=value``, at most ``most`` of them); the run's folder name where nothing differs or two labels tie."""
    flat = [{"recipe": c.get("recipe"), **(c.get("config") or {}), "budget": c.get("budget"), "seed": c.get("seed")}
            for c in configs]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    differ = [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]

    def text(value) -> str:
        value = str(value)
        return value if len(value) <= 24 else "…" + value[-23:]  # a path's end says more than its start

    labels = [" ".join(text(f.get(k)) if k == "recipe" else f"{k}={text(f.get(k))}" for k in differ[:most])
              + (f" (+{len(differ) - most} more)" if len(differ) > most else "") for f in flat]
    return [label if label and labels.count(label) == 1 else f"{label} {name}".strip()
            for label, name in zip(labels, names)]


def _finished_run(run_dir) -> tuple:
    """(run dir, its summary, its hardware, whether its metric is higher-better) of a run that has a summary."""
    from recipe_zoo import runs

    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise ZooError(f"{run_dir}: no summary.json (not a finished run directory)")
    summary, env = runs.read_json(summary_path), runs.read_json(run_dir / "env.json")
    missing = [k for k in ("status", "recipe", "benchmark", "metric", "value", "budget", "seed") if k not in summary]
    if missing:
        raise ZooError(f"{summary_path}: no {missing[0]!r} entry (not a zoo run's summary)")
    if "hardware" not in env:
        raise ZooError(f"{run_dir / 'env.json'}: no hardware entry (not written by a zoo run)")
    higher = summary.get("higher_is_better")
    if higher is None:  # summaries of older runs: the zoo's own recipe says (a recipe file is never imported here)
        higher = run_spec(run_dir, runs.load_run_config(run_dir)).higher_is_better
    return run_dir, summary, env["hardware"], bool(higher)


def _comparable_groups(entries: list[tuple]) -> dict[tuple, list]:
    """The successful runs grouped by what makes them comparable: benchmark, metric, budget, and the precision
    (a budget of work: any machine) or the hardware (a time budget)."""
    from recipe_zoo import board

    groups: dict[tuple, list] = {}
    for run_dir, summary, hardware, higher in entries:
        if summary["status"] == "ok":
            precision = (summary.get("extra") or {}).get("precision")
            where = (f"{board.precision_text(precision)}, every machine" if board.fixed_work(summary["budget"])
                     else hardware)
            groups.setdefault((summary["benchmark"], summary["metric"], summary["budget"], where), []).append(
                (run_dir, summary, higher))
    return groups
