"""Checkpoints written atomically and loaded without running pickled code."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import random
import tempfile
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core import distributed


def previous_path(path: str | os.PathLike) -> Path:
    """Where the checkpoint written before ``path`` is kept (``checkpoint.prev.pt`` beside ``checkpoint.pt``): a
    checkpoint damaged after it was written (a copy cut short, a bad disk) still leaves one to resume from."""
    path = Path(path)
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def damaged_path(path: str | os.PathLike) -> Path:
    """Where a checkpoint that cannot be read is set aside once a resume has read the previous one instead."""
    path = Path(path)
    return path.with_name(f"{path.stem}.damaged{path.suffix}")


def save_atomic(obj, path: str | os.PathLike, *, keep_previous: bool = False) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``.

    A crash mid-write leaves the previous checkpoint intact: rename is atomic on POSIX. Temp files a killed
    writer left behind are removed after the next successful write. With ``keep_previous`` the file replaced is
    kept as ``previous_path(path)``; the one kept before it is removed before the write, so the disk holds two
    checkpoints at most, at rest as during the write (as many as the write alone needs), and at every instant
    ``path`` or the previous one is complete (between the two renames only the previous one is).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = previous_path(path) if keep_previous else None
    if previous is not None and path.exists():  # without ``path`` the previous one is the only checkpoint: kept
        previous.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            out = _Writes(f)
            try:
                torch.save(obj, out)
            except RuntimeError:
                if out.error is None:
                    raise
                raise out.error from None  # torch's writer hides the OSError (disk full, ...) in a RuntimeError
            f.flush()
            os.fsync(f.fileno())
        if previous is not None and path.exists():
            os.replace(path, previous)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # name the checkpoint, not a file descriptor
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed mid-write (SIGKILL)
        stale.unlink(missing_ok=True)
    _fsync_folder(path.parent)


class _Writes:
    """A file object that remembers the OSError its writes raised."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        try:
            self.f.flush()
        except OSError as exc:
            self.error = exc
            raise


@contextlib.contextmanager
def replaced(path: str | os.PathLike):
    """A temporary path beside ``path`` to write to (its suffix kept: XGBoost picks its format by it); when the block
    ends well it is fsynced, renamed onto ``path`` and the folder fsynced, and removed when it does not: a reader
    never sees half a file, a kill or a power cut leaves the old file or the new one, and the processes of a
    torchrun job each write their own."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_folder(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    """``text`` written to ``path`` through ``replaced``: whole or not at all, and on disk when this returns."""
    with replaced(path) as tmp:
        tmp.write_text(text)


def _fsync_folder(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load(path: str | os.PathLike, map_location="cpu"):
    """Load with ``weights_only=True``: tensors and plain containers only, never code."""
    return torch.load(path, map_location=map_location, weights_only=True)


@dataclasses.dataclass
class Resumable:
    """The checkpoint a resume reads (``resumable``)."""

    path: Path
    blob: dict  # its contents, the tensors memory-mapped (no copy of the weights is read)
    skipped: str = ""  # why the newer checkpoint beside it was not read ('' when it was)


UNREADABLE = (pickle.UnpicklingError, RuntimeError, OSError, EOFError, ValueError, KeyError, TypeError, IndexError)


def resumable(path: str | os.PathLike) -> Resumable:
    """``path`` when it loads, else the previous checkpoint kept beside it (``previous_path``). A resume's rows
    (``zoo`` trims them to the checkpoint's step) and its state (``load_training``) are both chosen here, the same
    way, so they are of the same step. No readable one: a one-line ``ZooError`` naming the file and why."""
    from recipe_zoo.core.errors import ZooError

    path = Path(path)
    why = {}
    for candidate in (path, previous_path(path)):
        if not candidate.exists():
            continue
        try:
            blob = torch.load(candidate, map_location="cpu", weights_only=True, mmap=True)
            int(blob["loop"]["step"])  # a torch file, but not a training checkpoint: as unreadable to a resume
            return Resumable(candidate, blob, "; ".join(f"{p}: cannot be read ({w})" for p, w in why.items()))
        except UNREADABLE as exc:
            why[candidate] = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    if not why:
        raise ZooError(f"{path}: not found, nor the previous checkpoint {previous_path(path).name} beside it; "
                       "the run stopped before its first checkpoint: start it again")
    reasons = "; ".join(f"{p}: cannot be read ({w})" for p, w in why.items())
    alone = "" if len(why) > 1 else f"; no previous checkpoint ({previous_path(path).name}) is kept beside it"
    raise ZooError(f"{reasons}{alone}; the run cannot be resumed: start it again")


def read_weights(path: str | os.PathLike, *, key: str = "", allow: tuple[type, ...] = ()):
    """A weights file read without running code: ``.safetensors`` (a dict of tensors), else a torch file loaded
    with ``weights_only=True`` (tensors, plain containers and the ``allow``ed classes). A missing, unreadable or
    code-carrying file is a one-line ``ZooError`` naming it (``key``: the config key that gave it, ``weights=``)."""
    from safetensors import SafetensorError

    from recipe_zoo.core.errors import ZooError

    path = Path(path)
    where = f"{key}={path}" if key else str(path)
    if not path.is_file():
        raise ZooError(f"{where}: file not found")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        with torch.serialization.safe_globals(list(allow)):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # garbage, or a pickle of more than tensors (code, other classes)
        detail = next((line.strip() for line in str(exc).splitlines() if "GLOBAL" in line or "Unsupported" in line),
                      "it holds more than tensors")
        raise ZooError(f"{where}: refused to load: not a file of plain tensors ({detail[:200]}); files load with "
                       "weights_only=True, so code in a pickle never runs") from None
    except (SafetensorError, RuntimeError, OSError, EOFError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ZooError(f"{where}: cannot read weights ({first[:160]})") from None


def export_safetensors(model: torch.nn.Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Weights only, in safetensors (shared tensors are de-duplicated by safetensors itself)."""
    from safetensors.torch import save_file, save_model

    model = getattr(model, "_orig_mod", model)  # unwrap torch.compile
    if distributed.fsdp_sharded(model):  # FSDP2: every rank gathers, rank 0 writes
        full = distributed.gathered_state(model)
        if full:
            with replaced(path) as tmp:
                save_file({k: v.contiguous() for k, v in full.items()}, str(tmp), metadata=metadata)
        return
    with replaced(path) as tmp:  # a kill mid-write leaves no half a model.safetensors
        save_model(model, str(tmp), metadata=metadata)


def rng_state() -> dict:
    np_state = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": (np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]),
            "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy(), *rest))
    random.setstate(state["python"])


def save_training(path, model, optimizer, scaler, ema, slow, batches, state, keep: dict, metrics: dict,
                  fsdp: bool = False, precision: str = "") -> None:
    """The training loop's checkpoint (``fit``'s: model, optimizer, scaler, averages, data position, loop state
    and RNG): rank 0 writes; every rank takes part (FSDP gathers the shards, and each rank's RNG state is kept)."""
    if fsdp:
        model_state, optim_state = distributed.gathered_state(model, optimizer)
    else:
        model_state, optim_state = model.state_dict(), optimizer.state_dict()
    rng_ranks = distributed.gather_states(rng_state())
    if distributed.is_main():
        save_atomic({
            "model": model_state, "optimizer": optim_state, "scaler": scaler.state_dict(),
            "ema": ema.state_dict() if ema is not None else None, "batches": batches.state_dict(),
            "lookahead": slow.state_dict() if slow is not None else None,
            "loop": dict(vars(state)), "rng": rng_ranks[0], "rng_ranks": rng_ranks,
            "keep": {name: obj.state_dict() for name, obj in keep.items()}, "metrics": dict(metrics),
            "precision": precision,
        }, path, keep_previous=True)
    distributed.barrier()  # nobody goes on (or exits) before the file is complete


def load_training(path, model, optimizer, scaler, ema, slow, batches, state, keep: dict,
                  fsdp: bool = False, precision: str = "") -> tuple[dict[str, float], Path, str]:
    """``save_training``'s checkpoint back into the loop's objects: ``path``, or the previous one kept beside it
    when ``path`` cannot be read (``resumable``; the unreadable file is then set aside, so the next save keeps the
    good one as its previous). Every rank reads rank 0's checkpoint; each takes back its own RNG state when the
    world size matches. Returns the last evaluation's metrics (a run killed after its final evaluation has nothing
    left to run), the file read and why the newer one was not ('' when it was)."""
    from recipe_zoo.core.errors import ZooError

    chosen = resumable(path)
    used, skipped = chosen.path, chosen.skipped
    del chosen  # the memory-mapped copy: the state is read whole below
    try:
        blob = load(used)
    except UNREADABLE as exc:
        raise ZooError(f"{used}: cannot be read ({(str(exc).strip().splitlines() or [''])[0][:160]})") from None
    trained_in = blob.get("precision") or ""  # checkpoints from before it was recorded: not checked
    if precision and trained_in and trained_in != precision:
        raise ZooError(f"{used}: trained in {trained_in}, resumed in {precision}; resume with precision={trained_in} "
                       "(steps in another precision would not continue the same run)")
    if skipped and Path(path).exists() and distributed.is_main():
        os.replace(path, damaged_path(path))
        skipped += f"; set aside as {damaged_path(path).name}"
    if fsdp:
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                             set_optimizer_state_dict)

        full = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, blob["model"], options=full)
        for saved, group in zip(blob["optimizer"]["param_groups"], optimizer.param_groups):
            for key, value in saved.items():  # keys schedules add later (base_lr, ...) must exist to be loaded
                if key != "params":
                    group.setdefault(key, value)
        set_optimizer_state_dict(model, optimizer, blob["optimizer"], options=full)
    else:
        model.load_state_dict(blob["model"])
        optimizer.load_state_dict(blob["optimizer"])
    scaler.load_state_dict(blob["scaler"])
    if ema is not None and blob["ema"] is not None:
        ema.load_state_dict(blob["ema"])
    if slow is not None and blob.get("lookahead") is not None:
        slow.load_state_dict(blob["lookahead"])
    batches.load_state_dict(blob["batches"])
    saved = blob.get("keep") or {}
    for name, obj in keep.items():
        if name not in saved:
            raise ValueError(f"{path}: the checkpoint holds no {name!r} state (written by another version)")
        obj.load_state_dict(saved[name])
    for k, v in blob["loop"].items():
        setattr(state, k, v)
    ranks = blob.get("rng_ranks") or [blob["rng"]]
    if len(ranks) != distributed.world_size():
        raise ValueError(f"{path}: written by {len(ranks)} process(es); resume it with --nproc {len(ranks)} "
                         "(the data position and RNG states are per process)")
    set_rng_state(ranks[distributed.rank()])
    return dict(blob.get("metrics") or {}), used, skipped
