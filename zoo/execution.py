"""One run from start to end: the run directory, the recipe's training under the handle (``runs.Run``), the
outcome's status and exit code, the summary block, the index row, and resume's trimming of the logged rows."""
from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from recipe_zoo import extras, memory, ranking, results, runs
from recipe_zoo.core.api import RecipeSpec
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.datasets import sha256_file
from recipe_zoo.core.errors import ResourceError, ZooError
from recipe_zoo.runs import (Run, fingerprint, index_path, input_files, lock_run, make_logger, new_run_dir,
                             runs_root)

EXIT_OK, EXIT_CRASH, EXIT_BAD_INPUT, EXIT_DIVERGED = 0, 1, 2, 3
SUMMARY_KEYS = ("recipe", "benchmark", "metric", "value", "budget", "train_seconds", "peak_mem_mb", "peak_rss_mb",
                "params_M",
                "mfu_percent", "seed", "run_dir", "status", "rank")


def _trim_metrics(run: Run) -> None:
    """On resume keep only the rows the checkpoint already contains (and check the process count). The
    checkpoint is the one ``fit`` will load (``checkpoint.resumable``: the previous one when ``checkpoint.pt``
    cannot be read); none readable is a one-line error naming the file."""
    from recipe_zoo.core import checkpoint, distributed

    chosen = checkpoint.resumable(run.checkpoint_path)
    blob = chosen.blob
    processes = len(blob.get("rng_ranks") or [None])
    if processes != distributed.world_size():
        raise ZooError(f"{chosen.path}: written by {processes} process(es), resumed with "
                       f"{distributed.world_size()}; resume with --nproc {processes}")
    if not run.main:
        return
    step = blob["loop"]["step"]
    for name, attr in (("metrics.csv", "eval_rows"), ("train.csv", "train_rows")):
        path = run.dir / name
        if path.exists():
            setattr(run, attr, [r for r in runs.read_csv(path) if r["step"] <= step])


def _has_checkpoint(run: Run) -> bool:
    from recipe_zoo.core.checkpoint import previous_path

    return run.checkpoint_path.exists() or previous_path(run.checkpoint_path).exists()


@dataclass
class Outcome:
    code: int  # the process exit status
    run_dir: Path
    summary: dict


def execute(spec: RecipeSpec, cfg, *, budget: Budget, seed: int, out_root: Path, device: str = "auto",
            description: str = "", resume_dir: Path | None = None, recipe_file: str | None = None,
            track: list[str] | tuple = ()) -> Outcome:
    """Run ``spec`` with ``cfg``: the run directory, index row, summary block and exit status.

    Under torchrun every rank trains; rank 0 alone writes the run directory, index row and summary, and
    the other ranks send their side files to a scratch folder that is removed at the end.
    """
    from recipe_zoo.core import distributed

    extras.require(spec.name)
    cfg = resolved(spec, cfg, device)
    lock = None
    if distributed.is_main():
        run_dir = _agree(lambda: resume_dir or new_run_dir(out_root, spec.name))
        lock = lock_run(run_dir)
        run = Run(spec=spec, cfg=cfg, budget=budget, seed=seed, dir=run_dir, device=device,
                  resuming=resume_dir is not None, logger=make_logger(run_dir))
    else:
        run_dir = _agree(None)
        run = Run(spec=spec, cfg=cfg, budget=budget, seed=seed, dir=Path(tempfile.mkdtemp(prefix="zoo-rank-")),
                  device=device, resuming=resume_dir is not None, logger=logging.getLogger("zoo.rank"),
                  home=run_dir)
    try:
        return _execute(run, spec, cfg, budget=budget, seed=seed, out_root=out_root, device=device,
                        description=description, resume_dir=resume_dir, recipe_file=recipe_file, track=track)
    except OSError as exc:  # a full, failing or read-only disk outside training (config, env, summary): one line
        if exc.errno not in memory.WRITE_ERRNOS:
            raise
        raise ResourceError(memory.write_advice(exc, run_dir, _has_checkpoint(run))) from None
    finally:
        if not run.main:
            shutil.rmtree(run.dir, ignore_errors=True)
        if lock is not None:
            os.close(lock)  # the lock goes with it



def resolved(spec: RecipeSpec, cfg, device: str):
    """``cfg`` with ``precision=auto`` replaced by what it resolves to on this device for this recipe
    (``core.precision.resolve_precision``), so config.json, the card, the checkpoint, ``--resume`` and ``zoo
    predict`` all read the precision the run computed in."""
    if getattr(cfg, "precision", None) != "auto":
        return cfg
    from recipe_zoo.core.precision import choose_device, resolve_precision

    cfg = copy.copy(cfg)  # not dataclasses.replace: __post_init__ has already run on these values
    cfg.precision = resolve_precision(choose_device(device), "auto", spec.cpu_precision)
    return cfg


def _agree(make_dir):
    """Rank 0 makes the run directory (or fails with a message); every rank gets the same outcome."""
    from recipe_zoo.core import distributed

    payload = None
    if make_dir is not None:
        try:
            payload = ("ok", str(make_dir()))
        except ZooError as exc:
            payload = ("error", str(exc))
    payload = distributed.broadcast_object(payload)
    if payload[0] == "error":
        raise ZooError(payload[1])
    return Path(payload[1])


def _execute(run: Run, spec, cfg, *, budget, seed, out_root, device, description, resume_dir, recipe_file,
             track) -> Outcome:
    from recipe_zoo.core import distributed
    from recipe_zoo.core.precision import seed_everything

    run_dir = run.home or run.dir
    index = index_path(runs_root(resume_dir, spec.name) if resume_dir else out_root)
    env = fingerprint() if run.main else {}
    if run.resuming:
        _check_resumable(run, run_dir)
    elif run.main:
        _write_json(run_dir / "config.json", {
            "recipe": spec.name, "recipe_file": recipe_file, "config": dataclasses.asdict(cfg),
            "recipe_sha256": sha256_file(recipe_file) if recipe_file else None,
            "budget": str(budget), "seed": seed, "device": device, "processes": distributed.world_size(),
            "description": description, "track": list(track), "argv": sys.argv[1:]})
    row = _start(run, run_dir, index, env, cfg, budget=budget, seed=seed, description=description,
                 track=track) if run.main else {}
    seed_everything(seed)  # the same on every rank: the model is initialised alike
    trained = _train(run, spec, cfg, seed, run_dir)
    if not run.main:
        if trained.input_error is not None:
            raise trained.input_error
        if trained.status == "ok":  # leave together: a rank exiting while rank 0 still talks can abort gloo's peer
            distributed.barrier()
        return Outcome(trained.code, run_dir, {})
    try:
        return _finish(run, trained, run_dir, index, env, row)
    except OSError:  # summary.json or the curves not written (a full disk): the row must not stay running
        if "finished" not in row:
            _index_end(index, {**row, "status": "crash", "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
        raise


def _check_resumable(run: Run, run_dir: Path) -> None:
    """A resumed run has a checkpoint to go on from, and keeps only the logged rows that checkpoint holds."""
    if not _has_checkpoint(run):
        raise ZooError(f"{run_dir}: no checkpoint.pt to resume from (the run stopped before its first "
                       f"checkpoint, or {run.spec.name} trains without the core loop); start it again")
    _trim_metrics(run)


def _start(run: Run, run_dir: Path, index: Path, env: dict, cfg, *, budget, seed: int, description: str,
           track) -> dict:
    """Rank 0's start of a run: env.json, the index row that says ``running``, the trackers and the first log line.
    Returns the index row, which the end of the run completes."""
    from recipe_zoo.core import distributed

    spec = run.spec
    _write_json(run_dir / "env.json", env)
    row = {"run_id": run_dir.name, "commit_id": env["commit"], "dirty": int(env["dirty"]), "status": "running",
           "description": description or spec.name, "recipe": spec.name, "benchmark": run.benchmark,
           "metric_name": spec.metric, "higher_is_better": int(spec.higher_is_better), "seed": seed,
           "budget": str(budget), "hardware": env["hardware"], "run_dir": str(run_dir.resolve()),
           "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "pid": os.getpid(), "host": socket.gethostname()}
    _index_start(run, index, row)
    if os.environ.get("ZOO_RUN_FILE"):  # `zoo run --nproc`: the launcher closes the row if this rank dies
        Path(os.environ["ZOO_RUN_FILE"]).write_text(json.dumps({"index": str(index), "run_id": run_dir.name}))
    if track:
        from recipe_zoo.track import open_trackers

        run.trackers = open_trackers(list(track), run_dir, dataclasses.asdict(cfg), spec.name)
    world = distributed.world_size()
    run.log(f"{spec.name} on {run.benchmark}, budget {budget}, seed {seed}"
            + (f", {world} processes" if world > 1 else "") + f" -> {run_dir}")
    return row


@dataclass
class Trained:
    """How the training went: its metrics, status and exit code, the config it ended on (a smaller batch after an
    out-of-memory back-off), the input error to report as one line, and what it added to the process's memory."""
    metrics: dict
    status: str
    code: int
    cfg: object
    input_error: ZooError | None
    rss_growth_mb: float | None


def _train(run: Run, spec, cfg, seed: int, run_dir: Path) -> Trained:
    """The recipe trained under the handle; every way it can end becomes a status and an exit code."""
    from recipe_zoo.core import distributed, items
    from recipe_zoo.core.training_errors import Diverged, Interrupted, OutOfMemory
    from recipe_zoo.core.precision import seed_everything
    from recipe_zoo.core.rss import RssGrowth

    metrics, status, code, input_error = {}, "crash", EXIT_CRASH, None
    rss = RssGrowth()  # what the run adds to this process's memory: its data, model, batches
    try:
        with rss, items.collecting() as scored:
            metrics, cfg = memory.train_backing_off(spec, cfg, run, reseed=lambda: seed_everything(seed))
        status, code = "ok", EXIT_OK
        if not math.isfinite(metrics.get(run.metric, float("nan"))):
            raise RuntimeError(f"recipe returned no finite {run.metric!r}")
        if scored and distributed.is_main():  # the test's per-item scores: what a paired rank compares
            items.save(run_dir, scored[-1])
    except ZooError as exc:
        run.log(f"error: {exc}")
        status, code, input_error = "crash", exc.exit_code, exc
    except OutOfMemory as exc:
        input_error = ResourceError(memory.oom_advice(exc, cfg))
        run.log(f"error: {input_error}")
        status, code = "crash", input_error.exit_code
    except Diverged as exc:
        run.log(f"diverged: {exc}")
        status, code = "diverged", EXIT_DIVERGED
    except Interrupted as exc:
        run.log(f"interrupted: {exc}. Resume with: zoo run --resume {run_dir}")
        status, code = "interrupted", 128 + exc.signum
    except KeyboardInterrupt:
        run.log("interrupted twice: stopped without a new checkpoint")
        status, code = "interrupted", 130
    except OSError as exc:
        if exc.errno not in memory.WRITE_ERRNOS:  # not a full or read-only disk: a crash like any other
            status, code = _crash(run)
        else:
            input_error = ResourceError(memory.write_advice(exc, run_dir, _has_checkpoint(run)))
            run.log(f"error: {input_error}")
            status, code = "crash", input_error.exit_code
    except Exception:  # a bug or an unexpected failure: keep the traceback in the log
        status, code = _crash(run)
    return Trained(metrics, status, code, cfg, input_error, rss.growth_mb())


def _finish(run: Run, trained: Trained, run_dir: Path, index: Path, env: dict, row: dict) -> Outcome:
    """Rank 0's end of a run: summary.json, the curves, the trackers, the index row completed, the summary block
    printed; an input error raised for the CLI to print as one line."""
    from recipe_zoo.core import distributed

    metrics, status, code = trained.metrics, trained.status, trained.code
    if "processes" in metrics and metrics["processes"] > 1:
        run.extra = {"processes": int(metrics["processes"]), "global_batch": int(metrics["global_batch"]),
                     **run.extra}
    precision = getattr(trained.cfg, "precision", None)
    if status == "ok" and precision is not None:
        from recipe_zoo.core import artifact

        artifact.add_to_card(run_dir, precision=precision)  # what zoo predict computes in (config.json says it too)
        run.extra = {"precision": precision, **run.extra}
    summary = {**_summary(run, metrics, status), "run_rss_growth_mb": trained.rss_growth_mb}
    if status == "ok":
        summary["rank"] = _rank(run, {**summary, "metrics": metrics}, env["hardware"], index, run_dir.name)
    _write_json(run_dir / "summary.json", {**summary, "metrics": metrics, "exit_code": code,
                                           "inputs": input_files(trained.cfg) if status == "ok" else {}})
    _plot_curves(run)
    for tracker in run.trackers:
        tracker.finish(summary, run_dir)
    row["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    _index_end(index, {**row, "status": status, "metric": summary["value"], "metric_name": run.metric,
                       "higher_is_better": int(run.higher_is_better),
                       "memory_gb": summary["peak_mem_mb"] / 1024 if summary["peak_mem_mb"] else None,
                       "train_seconds": summary["train_seconds"], "params_M": summary["params_M"],
                       "mfu_percent": summary["mfu_percent"]})
    print(format_summary(summary), flush=True)
    for handler in run.logger.handlers:
        handler.close()
    run.logger.handlers.clear()
    if trained.input_error is not None:
        raise trained.input_error  # the CLI prints it as one line on stderr and exits 2
    if status == "ok":
        distributed.barrier()
    return Outcome(code, run_dir, summary)


def _index_start(run: Run, index: Path, row: dict) -> None:
    """The run's first index row. An index that cannot be read stops the run before it trains (exit 2): told now,
    the user moves it aside and loses a minute, not a run missing from ``zoo runs``."""
    try:
        results.upsert(index, row)
    except ZooError as exc:
        run.log(f"error: {exc}")
        for handler in run.logger.handlers:
            handler.close()
        run.logger.handlers.clear()
        raise


def _index_end(index: Path, row: dict) -> None:
    """The run's final index row. The index damaged meanwhile does not undo a finished run (summary.json holds it):
    a one-line warning says so."""
    try:
        results.upsert(index, row)
    except ZooError as exc:
        print(f"zoo: warning: run {row['run_id']} is not in the index: {exc}", file=sys.stderr, flush=True)


def _rank(run: Run, summary: dict, hardware: str, index: Path, run_id: str) -> str:
    """The ``rank:`` line. ``ranking.standing`` says when the board cannot be read; anything else it raises (a bug)
    still must not turn a finished run into a crash, so the line says it."""
    try:
        return ranking.standing(summary, hardware, run.higher_is_better, index, run_id, run.dir)
    except Exception as exc:
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())}"  # one line, whatever the message
        run.log(f"warning: could not rank the run: {why}")
        return f"not ranked: ranking failed ({why})"


def _crash(run: Run) -> tuple[str, int]:
    from recipe_zoo.core import distributed

    run.log("crash:\n" + traceback.format_exc())
    if not run.main:  # this rank has no log file: its traceback goes to stderr, where torchrun shows it
        print(f"[rank {distributed.rank()}] crash:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
    return "crash", EXIT_CRASH


def _summary(run: Run, metrics: dict, status: str) -> dict:
    from recipe_zoo.core.loop import peak_rss_mb  # rank 0's under torchrun

    value = metrics.get(run.metric)
    return {"recipe": run.spec.name, "benchmark": run.benchmark, "metric": run.metric,
            "higher_is_better": run.higher_is_better,
            "value": value if status == "ok" else None, "budget": str(run.budget),
            "train_seconds": metrics.get("train_seconds"), "peak_mem_mb": metrics.get("peak_mem_mb"),
            "peak_rss_mb": peak_rss_mb(), "params_M": metrics.get("params_M"), "mfu_percent": metrics.get("mfu_percent"), "seed": run.seed,
            "status": status, "run_dir": str(run.dir), "extra": dict(run.extra) if status == "ok" else {}}


def format_summary(summary: dict) -> str:
    lines = ["---"]
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        if isinstance(value, float):
            value = f"{value:.4f}" if key == "value" else f"{value:.1f}"
        lines.append(f"{key + ':':<16} {'n/a' if value is None else value}")
        if key == "mfu_percent":
            lines += [f"{k + ':':<16} {v}" for k, v in summary.get("extra", {}).items()]
    return "\n".join(lines)


def _write_json(path: Path, data: dict) -> None:
    from recipe_zoo.core.checkpoint import write_text

    write_text(path, json.dumps(data, indent=2, default=str) + "\n")  # fsynced, renamed, folder fsynced


def _plot_curves(run: Run) -> None:
    """curves.png and the pictures of the run's predictions (pictures.py), unless ``ZOO_PLOTS=0`` (many short runs:
    a sweep's, the tests'): matplotlib takes 0.2-0.4 s a picture, most of a short run's last second."""
    if os.environ.get("ZOO_PLOTS") != "0":
        from recipe_zoo import pictures

        pictures.draw_run(run)  # a picture that cannot be drawn is a warning line in the log
