"""The ``zoo`` command. Start-up stays light: torch and the recipes load only when a recipe runs."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from recipe_zoo.core.errors import ZooError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    try:
        with _callers_torch_kept():
            code = _main(argv)
    except BrokenPipeError:  # `zoo list | head`: the reader left early; stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor fail again flushing at exit
        return 128 + 13  # killed by SIGPIPE, as the shell reports it
    exit_file = os.environ.get("ZOO_EXIT_FILE")
    if exit_file and os.environ.get("RANK", "0") == "0":  # `zoo run --nproc` hands rank 0's status back
        Path(exit_file).write_text(str(code))
    return code


def _callers_torch_kept():
    """Called from Python with torch loaded (a notebook, a test), a run's switches and seeds are undone when it returns
    (core.precision.torch_state_kept); a ``zoo`` process has no caller's torch to keep, and skips the import."""
    import contextlib

    if "torch" not in sys.modules:
        return contextlib.nullcontext()
    from recipe_zoo.core.precision import torch_state_kept

    return torch_state_kept()


def _main(argv: list[str]) -> int:
    from recipe_zoo import parser as cli_parser

    parser = cli_parser.build()
    args, extra = parser.parse_known_args(argv)
    args.argv = argv
    if extra:  # key=value pairs given after options
        takes = hasattr(args, "overrides") or args.command == "bench"  # run, doctor, sweep, plan, predict, data prepare
        if not takes or any(e.startswith("-") or "=" not in e for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if hasattr(args, "overrides"):
            args.overrides = args.overrides + extra
        else:
            args.targets = args.targets + extra
    try:
        return COMMANDS[args.command](args)
    except ZooError as exc:
        if args.debug:
            raise
        rank = os.environ.get("RANK", "0") if os.environ.get("WORLD_SIZE", "1") != "1" else "0"
        print(f"zoo: error: {exc}" if rank == "0" else f"zoo: error (rank {rank}): {exc}", file=sys.stderr)
        return exc.exit_code


def cmd_list(args) -> int:
    from recipe_zoo.registry import static_list

    rows = static_list()
    width = max((len(r["name"]) for r in rows), default=10)
    bench = max((len(r.get("benchmark", "")) for r in rows), default=9)
    print(f"{'recipe':<{width}}  {'benchmark':<{bench}} {'metric':<13} {'budget':<7} {'devices':<9} summary")
    for r in rows:
        print(f"{r['name']:<{width}}  {r.get('benchmark', ''):<{bench}} {r.get('metric', ''):<13} "
              f"{r.get('budget', '60s'):<7} {_scale_label(r.get('scale_out') or 'torchrun: DDP'):<9} "
              f"{r.get('summary', '')}")
    return 0


def _scale_label(scale_out: str) -> str:
    """``zoo list``'s devices column: how a recipe scales out (``zoo show`` gives the sentence)."""
    if scale_out.startswith("single process"):
        return "1 process"
    return "DDP/FSDP" if "FSDP" in scale_out else "DDP"


def cmd_show(args) -> int:
    from recipe_zoo import config as config_mod

    spec = _resolve_spec(args.recipe)
    cfg = config_mod.build(spec.config, spec.defaults, None, [], spec.name)
    comments = config_mod.field_comments(spec.config)
    print(f"{spec.name}: {spec.summary}")
    print(f"benchmark: {spec.benchmark}   metric: {spec.metric} "
          f"({'higher' if spec.higher_is_better else 'lower'} is better)   default budget: {spec.budget}")
    print(f"scale-out: {spec.scale_out}")
    from recipe_zoo.doctor import lr_fields
    from recipe_zoo.sweep import batch_field

    lrs = ", ".join(f"{k}: {'/'.join(v)}" if k != "all" else "/".join(v) for k, v in lr_fields(spec.config).items())
    from recipe_zoo.core.loop import LoopSettings

    checks = "checklist, LR range test" if issubclass(spec.config, LoopSettings) else "the data checks"
    print(f"tuning: zoo doctor {spec.name} ({checks}) and zoo sweep {spec.name} KEY=a,b,... ; "
          f"LR fields {lrs or 'none'}; batch field {batch_field(spec.config) or 'none'}")
    keys = getattr(spec.config, "KEY_FIELDS", ())
    print("benchmark key: the data's name" + (f", plus :field=value for any of {', '.join(keys)} off its default "
                                               "(another split, target, metric or evaluation)" if keys else ""))
    print(f"source: {spec.source}\n")
    values = dataclasses.asdict(cfg)
    loop = {f.name for f in dataclasses.fields(LoopSettings)}
    types_ = config_mod.field_types(spec.config)
    width = max(len(k) for k in values)
    for key in [k for k in values if k not in loop] + [k for k in values if k in loop]:  # the loop's last
        mark = "*" if key in spec.defaults else " "
        valid = config_mod.field_range(types_[key])
        bounds = f" [{valid}]" if valid and (valid.low, valid.high) != (None, None) else ""
        print(f"{mark} {key:<{width}} = {values[key]!r:<14} # {comments.get(key, '')}{bounds}")
    print("\n* set by this variant; override any field with key=value\n")
    if "prepare" in spec.hooks:
        print(f"data at scale: stream=true reads the data as it trains; zoo data prepare {spec.name} data=SOURCE "
              "writes it once in the streamed form (then data=FOLDER)\n")
    _show_use(spec)
    from recipe_zoo import board

    all_rows = board.load_rows()
    rows = [r for r in all_rows if r["recipe"] == spec.name and not r.get("overrides")]
    if not rows:
        print(f"leaderboard: no measured rows yet (zoo bench {spec.name})")
    for r in rows:
        table = [t for t in all_rows if board.table_key(t) == board.table_key(r)]
        rank = next(k for t, k in zip(board.ranked(table), board.ranks(table)) if t is r)
        old = "" if board.protocol(r) == board.PROTOCOL else f", protocol {board.protocol(r)}"
        print(f"leaderboard: {board.value_text(r)} {r['metric']} (n={r['n']}) on {r['benchmark']} @ "
              f"{r['budget']}, {r['hardware']}{old}: rank {rank} of {len(table)}")
    return 0


def _show_use(spec) -> None:
    """What a finished run of the recipe can do: zoo predict's options and zoo export's formats."""
    from recipe_zoo import config as config_mod

    if spec.predict is None:
        print("predict: none registered (the recipe's @recipe(..., predict=...))\n")
        return
    from recipe_zoo.core.artifact import PredictOptions

    options = spec.predict_options or PredictOptions
    comments = config_mod.field_comments(options)
    values = dataclasses.asdict(options())
    width = max(len(k) for k in values)
    print("predict: zoo predict RUN_DIR [key=value ...] [--out FILE]; options:")
    for key, value in values.items():
        print(f"    {key:<{width}} = {value!r:<14} # {comments.get(key, '')}")
    print(f"export:  zoo export RUN_DIR --format {'|'.join(['safetensors', *spec.exports])}\n")


def _resolve_spec(target: str):
    from recipe_zoo import registry

    if target.endswith(".py"):
        specs = registry.load_file(target)
        if len(specs) > 1:
            names = ", ".join(s.name for s in specs)
            raise ZooError(f"{target}: registers several recipes ({names}); run one by name after importing")
        return specs[0]
    return registry.get(target)


def cmd_run(args) -> int:
    from recipe_zoo import config as config_mod
    from recipe_zoo import execution, runs

    out_root = args.out or runs.default_out()
    if args.nproc is not None and args.nproc < 1:
        raise ZooError(f"--nproc {args.nproc}: give 1 or more processes")
    if args.resume is not None:
        saved = runs.load_run_config(args.resume)
        if args.target or args.overrides:
            raise ZooError("--resume continues a run exactly as configured; drop the recipe and overrides")
        spec = _resolve_spec(saved.get("recipe_file") or saved["recipe"])
        cfg = config_mod.apply(spec.config(), saved["config"], str(args.resume / "config.json"))
        budget = runs.parse_budget_arg(saved["budget"])
        _check_device(saved.get("device", "auto"))
        nproc = args.nproc or saved.get("processes", 1)
        if _should_launch(spec, nproc):
            return launch(nproc, _without_nproc(args.argv))
        _join(spec, saved.get("device", "auto"))
        return execution.execute(spec, cfg, budget=budget, seed=saved["seed"], out_root=out_root,
                            device=saved.get("device", "auto"), description=saved.get("description", ""),
                            resume_dir=args.resume.resolve(), recipe_file=saved.get("recipe_file"),
                            track=saved.get("track", [])).code
    if not args.target:
        raise ZooError("zoo run needs a recipe name or file (see `zoo list`), or --resume RUN_DIR")
    spec = _resolve_spec(args.target)
    cfg = config_mod.build(spec.config, spec.defaults, args.config, args.overrides, spec.name)
    budget = runs.parse_budget_arg(args.budget or spec.budget)
    _check_device(args.device)
    if _should_launch(spec, args.nproc or 1):  # config, budget and device are checked here, before any process starts
        return launch(args.nproc, _without_nproc(args.argv))
    _join(spec, args.device)
    description = " ".join([spec.name, *args.overrides])
    recipe_file = str(Path(args.target).resolve()) if args.target.endswith(".py") else None
    return execution.execute(spec, cfg, budget=budget, seed=args.seed, out_root=out_root, device=args.device,
                        description=description, recipe_file=recipe_file, track=args.track).code


def _check_device(device: str) -> None:
    """A device that is not here (cuda without CUDA, a typo) is one line and exit 2 before anything starts."""
    from recipe_zoo.core.precision import choose_device

    choose_device(device)


def _should_launch(spec, nproc: int) -> bool:
    """True when this process is to start torchrun (N > 1 and not already a torchrun worker)."""
    from recipe_zoo.core import distributed

    if nproc <= 1 or distributed.launched():
        return False
    _refuse_single_process(spec)
    return True


def _refuse_single_process(spec) -> None:
    if not spec.distributed:
        raise ZooError(f"{spec.name} does not run under torchrun: {spec.scale_out}")


def _join(spec, device: str) -> None:
    """Inside a torchrun worker: join the process group (refusing recipes that do not scale out)."""
    from recipe_zoo.core import distributed

    if not distributed.launched():
        return
    _refuse_single_process(spec)
    distributed.init(device)
    import atexit

    atexit.register(distributed.teardown)


def _without_nproc(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def launch(nproc: int, argv: list[str]) -> int:
    """``torchrun --standalone --nproc-per-node N -m recipe_zoo ARGV``; returns rank 0's exit status.

    On CPU each process gets an equal share of the cores (torchrun alone would give each one thread).
    """
    import subprocess
    import tempfile

    env = dict(os.environ)
    module = "recipe_zoo"
    if env.get("ZOO_CHECKOUT"):  # started from a checkout without an install (zoo/checkout.py): the workers too
        module = "zoo"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env["ZOO_CHECKOUT"], env.get("PYTHONPATH")]))
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    with tempfile.TemporaryDirectory(prefix="zoo-launch-") as tmp:
        env["ZOO_EXIT_FILE"] = exit_file = str(Path(tmp) / "exit_code")
        env["ZOO_RUN_FILE"] = str(Path(tmp) / "run.json")  # rank 0's index row, for _close_unfinished
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", module, *argv]
        print("launching: " + " ".join(cmd[2:]), file=sys.stderr, flush=True)
        proc = subprocess.Popen(cmd, env=env)
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:  # torchrun and its workers got it too: wait while they checkpoint and stop
                continue
        path = Path(exit_file)
        if path.is_file() and path.read_text().strip():
            return int(path.read_text())
        _close_unfinished(Path(env["ZOO_RUN_FILE"]))
        return code


def _close_unfinished(run_file: Path) -> None:
    """Rank 0 ended without finishing its run (killed by torchrun after another rank failed, or by SIGTERM's
    default action while it wrote its crash): the index row it left ``running`` says ``crash``."""
    import json
    import time

    from recipe_zoo import results

    if not run_file.is_file():
        return
    where = json.loads(run_file.read_text())
    index = Path(where["index"])
    try:
        if any(r["run_id"] == where["run_id"] and r["status"] == "running" for r in results.all_rows(index)):
            results.upsert(index, {"run_id": where["run_id"], "status": "crash",
                                   "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
    except ZooError as exc:  # the index damaged meanwhile: the job's own exit status still goes back
        print(f"zoo: warning: run {where['run_id']} is left 'running' in the index: {exc}", file=sys.stderr)


def cmd_doctor(args) -> int:
    from recipe_zoo import config as config_mod
    from recipe_zoo import doctor, runs

    if os.environ.get("WORLD_SIZE", "1") != "1":
        raise ZooError("zoo doctor runs in one process: start it without torchrun")
    spec = _resolve_spec(args.target)
    cfg = config_mod.build(spec.config, spec.defaults, args.config, args.overrides, spec.name)
    budget = runs.parse_budget_arg(args.budget or spec.budget)
    _check_device(args.device)
    return doctor.doctor(spec, cfg, out_root=args.out or runs.default_out(), seed=args.seed, device=args.device,
                         steps=args.steps, budget=budget, overrides=args.overrides)


def cmd_sweep(args) -> int:
    from recipe_zoo import runs, sweep

    if os.environ.get("WORLD_SIZE", "1") != "1":
        raise ZooError("zoo sweep runs its trials one after another in one process: start it without torchrun")
    spec = _resolve_spec(args.target)
    return sweep.sweep(spec, args.overrides, seeds=args.seeds, budget_text=args.budget,
                       out_root=args.out or runs.default_out(), config_file=args.config,
                       use_lr_rule=not args.no_lr_rule,
                       recipe_file=str(Path(args.target).resolve()) if args.target.endswith(".py") else None)


def cmd_plan(args) -> int:
    from recipe_zoo import plan

    return plan.command(args)


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


def cmd_data(args) -> int:
    from recipe_zoo import data

    return data.command(args)


def cmd_bench(args) -> int:
    from recipe_zoo import bench, registry, runs

    if args.suite or args.copy_data or args.scale != 1.0:
        return _suite(args)
    targets = args.targets or [r["name"] for r in registry.static_list()]
    overrides = [t for t in targets if "=" in t]
    budget = [f"--budget {args.budget}"] if args.budget else []
    processes = args.nproc or int(os.environ.get("WORLD_SIZE", "1"))  # a torchrun worker: the job's size
    nproc = [f"--nproc {processes}"] if processes > 1 else []
    jobs = [(_resolve_spec(t), " ".join(["zoo bench", t, f"--seeds {args.seeds}", *budget, *nproc, *overrides]))
            for t in targets if "=" not in t]
    if any(_should_launch(spec, args.nproc or 1) for spec, _ in jobs):
        return launch(args.nproc, _without_nproc(args.argv))
    for spec, _ in jobs:
        _join(spec, "auto")
    return bench.bench(jobs, seeds=args.seeds, budget_text=args.budget, overrides=overrides,
                       out_root=args.out or runs.default_out(), allow_dirty=args.allow_dirty)


def _suite(args) -> int:
    from recipe_zoo import runs, suite

    if not args.suite:
        raise ZooError("--scale and --copy-data go with --suite NAME")
    if args.targets or args.budget or args.nproc or args.seeds != 3:
        raise ZooError("--suite runs its own recipes, budgets and one seed each: drop targets, --budget, --seeds "
                       "and --nproc (or drop --suite)")
    if args.copy_data:
        suite.copy_data(args.suite, args.copy_data)
        return 0
    return suite.run_suite(args.suite, scale=args.scale, out_root=args.out or runs.default_out(),
                           allow_dirty=args.allow_dirty)


def cmd_verify(args) -> int:
    from recipe_zoo import board, runs, verify

    if args.list:
        print(verify.listing(board.load_rows()))
        return 0
    if args.seeds < 1:
        raise ZooError("--seeds must be at least 1")
    return verify.verify(args.rows, seeds=args.seeds, out_root=args.out or runs.default_out(),
                         allow_dirty=args.allow_dirty)


def cmd_board(args) -> int:
    from recipe_zoo import board, runs

    if args.data is not None:
        from recipe_zoo.data import own_data_key

        if not args.data.exists():
            raise ZooError(f"{args.data}: file or folder not found")
        key = own_data_key(args.data)
        rows = board.local_board_rows(runs.index_path(args.out or runs.default_out()), key)
        print(f"runs on {args.data} ({key}):\n")
        print(board.render(rows, []).split("\n", 4)[-1] if rows else "no finished runs on this data yet")
        return 0
    if args.write:
        print(f"wrote {board.write_board()}")
    if args.plot:
        for path in board.write_charts():
            print(f"wrote {path}")
    if not (args.write or args.plot):
        rows, reported, checks = (board.all_rows(kind) for kind in ("results.jsonl", "reported.jsonl", "verify.jsonl"))
        sys.stdout.write(board.render(rows, reported, checks))
    return 0


def cmd_compare(args) -> int:
    import json

    from recipe_zoo import board, runs

    entries = []
    for run_dir in args.run_dirs:
        summary_path = run_dir / "summary.json"
        if not summary_path.is_file():
            raise ZooError(f"{run_dir}: no summary.json (not a finished run directory)")
        summary = json.loads(summary_path.read_text())
        env = json.loads((run_dir / "env.json").read_text())
        saved = runs.load_run_config(run_dir)
        spec = _resolve_spec(saved.get("recipe_file") or saved["recipe"])
        entries.append((run_dir, summary, env["hardware"], summary.get("higher_is_better", spec.higher_is_better)))
    for run_dir, summary, hardware, higher in entries:
        if summary["status"] != "ok":
            print(f"{run_dir}: status {summary['status']}, nothing to rank")
            continue
        index = runs.index_path(runs.runs_root(run_dir, summary["recipe"]))
        print(f"{run_dir}: {summary['metric']} {summary['value']:.4f} -> "
              f"{board.standing(summary, hardware, higher, index, run_dir.name)}")
    groups: dict[tuple, list] = {}
    for run_dir, summary, hardware, higher in entries:
        if summary["status"] == "ok":
            groups.setdefault((summary["benchmark"], summary["metric"], summary["budget"], hardware), []).append(
                (run_dir, summary, higher))
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
        print("\nruns on different benchmarks, budgets or hardware are listed apart: they are not comparable")
    return 0


def cmd_new(args) -> int:
    from recipe_zoo.core.envinfo import git_state
    from recipe_zoo import templates

    spec = _resolve_spec(args.source)
    commit, _ = git_state(Path(__file__).resolve().parent)
    path, *parts = templates.write_template(spec, args.name, args.out, commit, vendor=args.vendor)
    print(f"wrote {path}" + (f" and {len(parts) - 1} recipe modules in {parts[0].parent}/" if parts else
                             " (it imports no recipe module: nothing to vendor)" if args.vendor else "")
          + f": run it with `zoo run {path}`")
    return 0


def cmd_predict(args) -> int:
    from recipe_zoo import predict

    _check_device(args.device)
    return predict.cmd_predict(args)


def cmd_export(args) -> int:
    from recipe_zoo import predict

    return predict.cmd_export(args)


COMMANDS = {"list": cmd_list, "show": cmd_show, "run": cmd_run, "runs": cmd_runs, "bench": cmd_bench,
            "board": cmd_board, "compare": cmd_compare, "new": cmd_new, "data": cmd_data,
            "doctor": cmd_doctor, "sweep": cmd_sweep, "plan": cmd_plan, "verify": cmd_verify,
            "predict": cmd_predict, "export": cmd_export}
