"""Out of memory in a run: on an accelerator, a first step that does not fit is tried again with half the
micro-batch and twice the accumulation (the same global batch), down to a micro-batch of 1; otherwise, and on a
CPU (where the allocator's failure is not a clean error to recover from), the run stops with the fixes in order.
Out of disk (or a disk that fails a write, or a path that cannot be written): one line with the fix
(``write_advice``).
"""
from __future__ import annotations

import dataclasses
import errno
import gc
import json
from pathlib import Path

import torch


def smaller_batch(exc, cfg) -> tuple[object, str] | None:
    """``cfg`` with half the micro-batch and the same global batch, and the change in words; None when the config
    has no such pair, the micro-batch is 1 already, or its samples meet inside the loss (``BATCH_IN_LOSS``: a
    contrastive loss's negatives are the micro-batch, so halving it changes the objective)."""
    if not dataclasses.is_dataclass(cfg) or exc.micro_batch < 2 or getattr(cfg, "BATCH_IN_LOSS", False):
        return None
    names = {f.name for f in dataclasses.fields(cfg)}
    half = exc.micro_batch // 2
    if {"micro_batch", "batch_tokens"} <= names and cfg.micro_batch in (0, exc.micro_batch):  # 0: it was sized
        return dataclasses.replace(cfg, micro_batch=half), f"micro_batch={half} (accumulation doubles)"
    if {"batch_size", "accum_steps"} <= names and cfg.batch_size == exc.micro_batch:
        return (dataclasses.replace(cfg, batch_size=half, accum_steps=2 * exc.accum_steps),
                f"batch_size={half} accum_steps={2 * exc.accum_steps}")
    return None


def train_backing_off(spec, cfg, run, reseed) -> tuple[dict, object]:
    """``spec.train(cfg, run)``; an accelerator's out-of-memory error in the first step of a single-process run
    that did not resume makes it start again with ``smaller_batch`` (logged, and written to config.json so a resume
    or ``zoo predict`` sees what trained). Returns the metrics and the config that trained them."""
    from recipe_zoo.core import distributed
    from recipe_zoo.core.training_errors import OutOfMemory

    while True:
        try:
            return spec.train(cfg, run), cfg
        except OutOfMemory as exc:
            smaller = smaller_batch(exc, cfg) if (exc.recoverable and exc.step == 0 and not run.resuming
                                                  and distributed.world_size() == 1) else None
            if smaller is None:
                raise
            cfg, change = smaller
            run.log(f"out of memory in the first step with a micro-batch of {exc.micro_batch}: starting again with "
                    f"{change}, the same global batch")
            _restart(run, cfg)
            reseed()


def _restart(run, cfg) -> None:
    run.cfg = cfg
    run.eval_rows.clear()
    run.train_rows.clear()
    for name in ("metrics.csv", "train.csv"):
        (run.dir / name).unlink(missing_ok=True)
    config = run.dir / "config.json"
    if run.main and config.exists():
        saved = json.loads(config.read_text())
        saved["config"] = dataclasses.asdict(cfg)
        config.write_text(json.dumps(saved, indent=2, default=str) + "\n")
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def oom_advice(exc, cfg) -> str:
    """The out-of-memory message with the fixes in the order they cost least: the same global batch in smaller
    micro-batches, activation checkpointing, bf16 on a GPU, then a smaller model or shorter inputs."""
    names = {f.name for f in dataclasses.fields(cfg)} if dataclasses.is_dataclass(cfg) else set()
    b, a = exc.micro_batch, exc.accum_steps
    fixes = []
    if b > 1:
        if {"micro_batch", "batch_tokens"} <= names:
            fixes.append(f"micro_batch={b // 2} (accumulation doubles to keep batch_tokens)")
        elif {"batch_size", "accum_steps"} <= names:
            fixes.append(f"batch_size={b // 2} accum_steps={2 * a} (the same global batch)")
        else:
            fixes.append(f"a micro-batch of {b // 2} with {2 * a} accumulation steps (the same global batch)")
    if exc.can_checkpoint and "activation_checkpointing" in names:
        fixes.append("activation_checkpointing=true (recompute each block in backward)")
    if exc.device.type == "cuda" and exc.precision == "fp32" and "precision" in names:
        fixes.append("precision=bf16")
    fixes.append("a smaller model or shorter inputs")
    return f"{exc}. Try, in order: " + "; ".join(f"{i}) {fix}" for i, fix in enumerate(fixes, 1))


WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO)


def write_advice(exc: OSError, run_dir: Path, has_checkpoint: bool) -> str:
    """One line for a full, read-only or forbidden path met mid-run."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    fix = "free some space or give --out another disk" if full else "check its permissions or give --out another folder"
    if exc.errno == errno.EIO:
        fix = "the disk failed a write: check it, or give --out another disk"
    kept = f"; the last checkpoint is intact: zoo run --resume {run_dir}" if has_checkpoint else ""
    return f"{exc.filename or run_dir}: {exc.strerror or exc}; {fix}{kept}"
