"""The ``zoo`` command. Start-up stays light: torch and the recipes load only when a recipe runs."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from zoo.errors import ZooError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zoo", description="Training recipes with honest numbers.")
    p.add_argument("--debug", action="store_true", help="show tracebacks for input errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("list", help="list recipes: name, default benchmark, metric, one line")

    show = sub.add_parser("show", help="a recipe's resolved config with each field's comment")
    show.add_argument("recipe")

    run = sub.add_parser("run", help="run a recipe: zoo run NAME|PATH.py [key=value ...]",
                         description="Run a recipe by name or from a recipe file. key=value pairs override "
                                     "config fields (see `zoo show NAME`).")
    run.add_argument("target", nargs="?", help="recipe name (vision/resnet) or path to a recipe .py file")
    run.add_argument("overrides", nargs="*", help="key=value config overrides")
    run.add_argument("--budget", help="training budget: 90s, 5m, 1h, 300steps, 3epochs (default: the recipe's)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", type=Path, default=None, help="runs root (default $ZOO_RUNS or ./runs)")
    run.add_argument("--config", help="JSON or TOML file of config values, applied before key=value overrides")
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a stopped run from its checkpoint")
    run.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")

    runs = sub.add_parser("runs", help="list local runs from the results index")
    runs.add_argument("--out", type=Path, default=None, help="runs root (default $ZOO_RUNS or ./runs)")
    runs.add_argument("--tsv", action="store_true", help="export as TSV: commit metric memory_gb status description ...")

    data = sub.add_parser("data", help="datasets: list, fetch")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    data_sub.add_parser("list", help="registered datasets and whether they are in the cache")
    fetch = data_sub.add_parser("fetch", help="download a dataset into the cache, verified by sha256")
    fetch.add_argument("name")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command != "run" or any(e.startswith("-") or "=" not in e for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = args.overrides + extra
    try:
        return COMMANDS[args.command](args)
    except ZooError as exc:
        if args.debug:
            raise
        print(f"zoo: error: {exc}", file=sys.stderr)
        return exc.exit_code


def cmd_list(args) -> int:
    from zoo.registry import static_list

    rows = static_list()
    width = max((len(r["name"]) for r in rows), default=10)
    print(f"{'recipe':<{width}}  {'benchmark':<16} {'metric':<10} {'budget':<7} summary")
    for r in rows:
        print(f"{r['name']:<{width}}  {r.get('benchmark', ''):<16} {r.get('metric', ''):<10} "
              f"{r.get('budget', '60s'):<7} {r.get('summary', '')}")
    return 0


def cmd_show(args) -> int:
    from zoo import config as config_mod

    spec = _resolve_spec(args.recipe)
    cfg = config_mod.build(spec.config, spec.defaults, None, [], spec.name)
    comments = config_mod.field_comments(spec.config)
    print(f"{spec.name}: {spec.summary}")
    print(f"benchmark: {spec.benchmark}   metric: {spec.metric} "
          f"({'higher' if spec.higher_is_better else 'lower'} is better)   default budget: {spec.budget}")
    print(f"source: {spec.source}\n")
    values = dataclasses.asdict(cfg)
    width = max(len(k) for k in values)
    for key, value in values.items():
        mark = "*" if key in spec.defaults else " "
        print(f"{mark} {key:<{width}} = {value!r:<14} # {comments.get(key, '')}")
    print("\n* set by this variant; override any field with key=value")
    return 0


def _resolve_spec(target: str):
    from zoo import registry

    if target.endswith(".py"):
        specs = registry.load_file(target)
        if len(specs) > 1:
            names = ", ".join(s.name for s in specs)
            raise ZooError(f"{target}: registers several recipes ({names}); run one by name after importing")
        return specs[0]
    return registry.get(target)


def cmd_run(args) -> int:
    from zoo import config as config_mod
    from zoo import runs

    out_root = args.out or runs.default_out()
    if args.resume is not None:
        saved = runs.load_run_config(args.resume)
        if args.target or args.overrides:
            raise ZooError("--resume continues a run exactly as configured; drop the recipe and overrides")
        spec = _resolve_spec(saved.get("recipe_file") or saved["recipe"])
        cfg = config_mod.apply(spec.config(), saved["config"], str(args.resume / "config.json"))
        budget = runs.parse_budget_arg(saved["budget"])
        return runs.execute(spec, cfg, budget=budget, seed=saved["seed"], out_root=out_root,
                            device=saved.get("device", "auto"), description=saved.get("description", ""),
                            resume_dir=args.resume.resolve(), recipe_file=saved.get("recipe_file"))
    if not args.target:
        raise ZooError("zoo run needs a recipe name or file (see `zoo list`), or --resume RUN_DIR")
    spec = _resolve_spec(args.target)
    cfg = config_mod.build(spec.config, spec.defaults, args.config, args.overrides, spec.name)
    budget = runs.parse_budget_arg(args.budget or spec.budget)
    description = " ".join([spec.name, *args.overrides])
    recipe_file = str(Path(args.target).resolve()) if args.target.endswith(".py") else None
    return runs.execute(spec, cfg, budget=budget, seed=args.seed, out_root=out_root, device=args.device,
                        description=description, recipe_file=recipe_file)


def cmd_runs(args) -> int:
    from zoo import results, runs

    rows = results.all_rows((args.out or runs.default_out()) / "index.sqlite")
    if args.tsv:
        sys.stdout.write(results.to_tsv(rows))
        return 0
    print(f"{'run_id':<23} {'recipe':<18} {'benchmark':<16} {'metric':<10} {'value':>8} {'status':<11} budget")
    for r in rows:
        value = "" if r["metric"] is None else f"{r['metric']:.4f}"
        print(f"{r['run_id']:<23} {r['recipe']:<18} {r['benchmark']:<16} {r['metric_name']:<10} {value:>8} "
              f"{r['status']:<11} {r['budget']}")
    return 0


def cmd_data(args) -> int:
    from zoo import data

    if args.data_command == "fetch":
        path = data.fetch(args.name)
        print(f"{args.name}: {path}")
        return 0
    print(f"cache: {data.cache_root()}")
    print(f"{'dataset':<16} {'domain':<8} {'source':<12} {'here':<5} description")
    for info in data.DATASETS.values():
        here = "yes" if data.is_present(info) else "no"
        print(f"{info.name:<16} {info.domain:<8} {info.source:<12} {here:<5} {info.description}")
    return 0


COMMANDS = {"list": cmd_list, "show": cmd_show, "run": cmd_run, "runs": cmd_runs, "data": cmd_data}
