"""The ``zoo`` command: its arguments parsed (``parser``), the command run, an input error printed as one line with
its exit status. Start-up stays light: torch and the recipes load only when a recipe runs. The commands live by
what they do: ``catalog`` (list, show), ``train_commands`` (run, doctor, sweep, bench, verify), ``result_commands``
(runs, board, compare); the ones that hand straight on to their module are here."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from recipe_zoo.catalog import cmd_list, cmd_show, resolve_spec
from recipe_zoo.core.errors import ZooError
from recipe_zoo.launch import check_device
from recipe_zoo.result_commands import cmd_board, cmd_compare, cmd_runs
from recipe_zoo.train_commands import cmd_bench, cmd_doctor, cmd_run, cmd_sweep, cmd_verify


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


def cmd_plan(args) -> int:
    from recipe_zoo import plan

    return plan.command(args)


def cmd_data(args) -> int:
    from recipe_zoo import data

    return data.command(args)


def cmd_new(args) -> int:
    from recipe_zoo.core.envinfo import git_state
    from recipe_zoo import templates

    spec = resolve_spec(args.source)
    commit, _ = git_state(Path(__file__).resolve().parent)
    path, *parts = templates.write_template(spec, args.name, args.out, commit, vendor=args.vendor)
    print(f"wrote {path}" + (f" and {len(parts) - 1} recipe modules in {parts[0].parent}/" if parts else
                             " (it imports no recipe module: nothing to vendor)" if args.vendor else "")
          + f": run it with `zoo run {path}`")
    return 0


def cmd_predict(args) -> int:
    from recipe_zoo import predict

    check_device(args.device)
    return predict.cmd_predict(args)


def cmd_export(args) -> int:
    from recipe_zoo import predict

    return predict.cmd_export(args)


COMMANDS = {"list": cmd_list, "show": cmd_show, "run": cmd_run, "runs": cmd_runs, "bench": cmd_bench,
            "board": cmd_board, "compare": cmd_compare, "new": cmd_new, "data": cmd_data,
            "doctor": cmd_doctor, "sweep": cmd_sweep, "plan": cmd_plan, "verify": cmd_verify,
            "predict": cmd_predict, "export": cmd_export}
