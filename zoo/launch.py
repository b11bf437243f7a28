"""Where a command's processes come from: the device it asks for, checked before anything starts; torchrun started
for ``--nproc N`` with the same arguments (rank 0's exit status handed back); and inside a torchrun worker, the
process group joined."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from recipe_zoo.core.errors import ZooError


def check_device(device: str) -> None:
    """A device that is not here (cuda without CUDA, a typo) is one line and exit 2 before anything starts."""
    from recipe_zoo.core.precision import choose_device

    choose_device(device)


def should_launch(spec, nproc: int) -> bool:
    """True when this process is to start torchrun (N > 1 and not already a torchrun worker)."""
    from recipe_zoo.core import distributed

    if nproc <= 1 or distributed.launched():
        return False
    _refuse_single_process(spec)
    return True


def _refuse_single_process(spec) -> None:
    if not spec.distributed:
        raise ZooError(f"{spec.name} does not run under torchrun: {spec.scale_out}")


def join_process_group(spec, device: str) -> None:
    """Inside a torchrun worker: join the process group (refusing recipes that do not scale out)."""
    from recipe_zoo.core import distributed

    if not distributed.launched():
        return
    _refuse_single_process(spec)
    distributed.init(device)
    import atexit

    atexit.register(distributed.teardown)


def without_nproc(argv: list[str]) -> list[str]:
    """The command line a worker gets: this one without ``--nproc N``."""
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
        # all_rows reads a row whose process is gone as killed: rank 0 died here because the job failed: crash
        rows = results.all_rows(index)
        if any(r["run_id"] == where["run_id"] and r["status"] in ("running", "killed") for r in rows):
            results.upsert(index, {"run_id": where["run_id"], "status": "crash",
                                   "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
    except ZooError as exc:  # the index damaged meanwhile: the job's own exit status still goes back
        print(f"zoo: warning: run {where['run_id']} is left 'running' in the index: {exc}", file=sys.stderr)
