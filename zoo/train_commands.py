"""The commands that train: ``zoo run`` (or ``--resume``), ``zoo doctor``, ``zoo sweep``, ``zoo bench`` (recipes on
their benchmarks, or a named suite) and ``zoo verify``. Each checks the recipe, config, budget and device before
anything trains, and ``--nproc N`` starts the same command under torchrun (``launch``)."""
from __future__ import annotations

import os
from pathlib import Path

from recipe_zoo.catalog import resolve_spec, run_spec
from recipe_zoo.core.errors import ZooError
from recipe_zoo.launch import check_device, join_process_group, launch, should_launch, without_nproc


def cmd_run(args) -> int:
    from recipe_zoo import config as config_mod
    from recipe_zoo import execution, runs

    out_root = args.out or runs.default_out()
    if args.nproc is not None and args.nproc < 1:
        raise ZooError(f"--nproc {args.nproc}: give 1 or more processes")
    if args.resume is not None:
        return _resume(args, out_root)
    if not args.target:
        raise ZooError("zoo run needs a recipe name or file (see `zoo list`), or --resume RUN_DIR")
    spec = resolve_spec(args.target)
    overrides, budget_text = with_reference(spec, args.reference, args.overrides, args.budget)
    cfg = config_mod.build(spec.config, spec.defaults, args.config, overrides, spec.name)
    budget = runs.parse_budget_arg(budget_text or spec.budget)
    check_device(args.device)
    if should_launch(spec, args.nproc or 1):  # config, budget and device are checked here, before any process starts
        return launch(args.nproc, without_nproc(args.argv))
    join_process_group(spec, args.device)
    description = " ".join([spec.name, *overrides])
    recipe_file = str(Path(args.target).resolve()) if args.target.endswith(".py") else None
    return execution.execute(spec, cfg, budget=budget, seed=args.seed, out_root=out_root, device=args.device,
                             description=description, recipe_file=recipe_file, track=args.track).code


def with_reference(spec, reference: str | None, overrides: list[str], budget: str | None):
    """The overrides and budget of ``--reference [BENCHMARK]``: the reference's pinned settings, then the user's
    key=value (which may change one: the run is then a variant at the reference's work); as given without it."""
    from recipe_zoo import references

    if reference is None:
        return overrides, budget
    if budget:
        raise ZooError(f"--budget {budget} with --reference: a reference run's work is fixed; drop one of them")
    ref = references.find(spec.name, reference or None)
    precision = references.pinned_precision(ref)
    print(f"reference: {ref.expanded()}" + (
        f" ({precision} with TF32 off on every machine: the same arithmetic everywhere, so this run joins the "
        f"{ref.benchmark} reference table whatever this machine is)" if precision else ""), flush=True)
    return [*ref.settings, *overrides], ref.work


def _resume(args, out_root: Path) -> int:
    """``zoo run --resume RUN_DIR``: the run exactly as its config.json says, on as many processes as before."""
    from recipe_zoo import config as config_mod
    from recipe_zoo import execution, runs

    saved = runs.load_run_config(args.resume)
    named = args.target if args.target and args.target.endswith(".py") else None  # a recipe file's run: the user's
    if (args.target and not named) or args.overrides:
        raise ZooError("--resume continues a run exactly as configured; drop the recipe and overrides")
    spec = run_spec(args.resume, saved, named, how=f"zoo run FILE.py --resume {args.resume}")
    cfg = config_mod.apply(spec.config(), saved["config"], str(args.resume / "config.json"))
    budget = runs.parse_budget_arg(saved["budget"])
    check_device(saved.get("device", "auto"))
    nproc = args.nproc or saved.get("processes", 1)
    if should_launch(spec, nproc):
        return launch(nproc, without_nproc(args.argv))
    join_process_group(spec, saved.get("device", "auto"))
    return execution.execute(spec, cfg, budget=budget, seed=saved["seed"], out_root=out_root,
                             device=saved.get("device", "auto"), description=saved.get("description", ""),
                             resume_dir=args.resume.resolve(),
                             recipe_file=str(Path(named).resolve()) if named else None,
                             track=saved.get("track", [])).code


def cmd_doctor(args) -> int:
    from recipe_zoo import config as config_mod
    from recipe_zoo import doctor, runs

    if os.environ.get("WORLD_SIZE", "1") != "1":
        raise ZooError("zoo doctor runs in one process: start it without torchrun")
    spec = resolve_spec(args.target)
    cfg = config_mod.build(spec.config, spec.defaults, args.config, args.overrides, spec.name)
    budget = runs.parse_budget_arg(args.budget or spec.budget)
    check_device(args.device)
    return doctor.doctor(spec, cfg, out_root=args.out or runs.default_out(), seed=args.seed, device=args.device,
                         steps=args.steps, budget=budget, overrides=args.overrides)


def cmd_sweep(args) -> int:
    from recipe_zoo import runs, sweep

    if os.environ.get("WORLD_SIZE", "1") != "1":
        raise ZooError("zoo sweep runs its trials one after another in one process: start it without torchrun")
    spec = resolve_spec(args.target)
    return sweep.sweep(spec, args.overrides, seeds=args.seeds, budget_text=args.budget,
                       out_root=args.out or runs.default_out(), config_file=args.config,
                       use_lr_rule=not args.no_lr_rule,
                       recipe_file=str(Path(args.target).resolve()) if args.target.endswith(".py") else None)


def cmd_bench(args) -> int:
    from recipe_zoo import bench, references, registry, runs, suite

    if args.suite or args.scale != 1.0 or (args.copy_data and args.reference is None):
        return _suite(args)
    if args.speed and args.reference is None:
        raise ZooError("--speed measures a reference run: give --reference (zoo board lists them)")
    overrides = [t for t in args.targets if "=" in t]
    names = [t for t in args.targets if "=" not in t]
    seeds = 1 if args.speed and args.seeds == 3 else args.seeds  # the speed view's default: one seed
    processes = args.nproc or int(os.environ.get("WORLD_SIZE", "1"))  # a torchrun worker: the job's size
    nproc = [f"--nproc {processes}"] if processes > 1 else []
    if args.reference is not None:
        if args.budget:
            raise ZooError(f"--budget {args.budget} with --reference: a reference run's work is fixed")
        refs = ([references.find(resolve_spec(n).name, args.reference or None) for n in names] if names else
                [r for r in references.REFERENCES if args.reference in ("", r.benchmark)])
        if not refs:
            raise ZooError(f"--reference {args.reference}: no reference runs on it (zoo board lists them)")
        if args.copy_data:  # the data these reference runs read, to carry to a machine that cannot download it
            suite.copy_data([r.dataset for r in refs], args.copy_data)
            return 0
        speed = ["--speed"] if args.speed else []
        jobs = [(resolve_spec(r.recipe), " ".join([r.command("bench"), f"--seeds {seeds}", *speed, *nproc,
                                                     *overrides]), [*r.settings, *overrides], r.work) for r in refs]
    else:
        targets = names or [r["name"] for r in registry.static_list()]
        budget = [f"--budget {args.budget}"] if args.budget else []
        jobs = [(resolve_spec(t), " ".join(["zoo bench", t, f"--seeds {seeds}", *budget, *nproc, *overrides]),
                 overrides, args.budget) for t in targets]
    if any(should_launch(spec, args.nproc or 1) for spec, *_ in jobs):
        return launch(args.nproc, without_nproc(args.argv))
    for spec, *_ in jobs:
        join_process_group(spec, "auto")
    return bench.bench(jobs, seeds=seeds, out_root=args.out or runs.default_out(), allow_dirty=args.allow_dirty,
                       speed_only=args.speed)


def _suite(args) -> int:
    from recipe_zoo import runs, suite

    if not args.suite:
        raise ZooError("--scale and --copy-data go with --suite NAME")
    if args.targets or args.budget or args.nproc or args.seeds != 3:
        raise ZooError("--suite runs its own recipes, budgets and one seed each: drop targets, --budget, --seeds "
                       "and --nproc (or drop --suite)")
    if args.copy_data:
        suite.copy_data(suite.datasets(args.suite), args.copy_data)
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
