"""Checkpoints written atomically and loaded without running pickled code."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import torch


def save_atomic(obj, path: str | os.PathLike) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``.

    A crash mid-write leaves the previous checkpoint intact: rename is atomic on POSIX. Temp files a killed
    writer left behind are removed after the next successful write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # name the checkpoint, not a file descriptor
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed mid-write (SIGKILL)
        stale.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
def replaced(path: Path):
    """A temporary path beside ``path`` to write to, renamed onto ``path`` when the block ends well and removed
    when it does not: a reader never sees half a file, and the processes of a torchrun job each write their own."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load(path: str | os.PathLike, map_location="cpu"):
    """Load with ``weights_only=True``: tensors and plain containers only, never code."""
    return torch.load(path, map_location=map_location, weights_only=True)


def read_weights(path: str | os.PathLike, *, key: str = "", allow: tuple[type, ...] = ()):
    """A weights file read without running code: ``.safetensors`` (a dict of tensors), else a torch file loaded
    with ``weights_only=True`` (tensors, plain containers and the ``allow``ed classes). A missing, unreadable or
    code-carrying file is a one-line ``ZooError`` naming it (``key``: the config key that gave it, ``weights=``)."""
    import pickle

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

    from recipe_zoo.core.distributed import fsdp_sharded, gathered_state

    model = getattr(model, "_orig_mod", model)  # unwrap torch.compile
    if fsdp_sharded(model):  # FSDP2: every rank gathers, rank 0 writes
        full = gathered_state(model)
        if full:
            save_file({k: v.contiguous() for k, v in full.items()}, str(path), metadata=metadata)
        return
    save_model(model, str(path), metadata=metadata)
