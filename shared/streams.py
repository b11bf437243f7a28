"""Data read from disk as it is used: arrays indexed like tensors, so the in-memory batching code streams unchanged.

``NpyArray`` is a ``.npy`` file read with ``os.pread``: ``a[idx]`` reads those rows (coalesced into contiguous runs)
and nothing else, so a process's memory holds what it is using, not the file; the file's pages stay in the OS page
cache, shared by every process, and are not charged to any process's RSS as a memory map's pages would be.
``NpyWriter`` appends rows to a ``.npy`` file of unknown final length (written atomically: temp file, rename).
``LazyItems`` builds rows with a function of the indices (decoding image files, say).

``TensorBatches`` (``recipe_zoo.core.batches``) takes any of these in place of a tensor; with ``workers`` it reads
the next batches in worker processes while the current one trains (``Prefetch``). The data position stays a pair
(epoch, index), so resume is exact whatever is prefetched.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core.errors import ZooError

HEADER_BYTES = 256  # NpyWriter's header room: a multiple of 64, as numpy aligns it; fits any shape it writes
_WIDEN = {np.dtype("uint16"): np.int32, np.dtype("uint32"): np.int64}  # torch has no arithmetic on these


def is_lazy(x) -> bool:
    """An array read on demand (not a tensor): index it with a tensor of row indices."""
    return isinstance(x, (NpyArray, LazyItems))


def take(x, idx: torch.Tensor) -> torch.Tensor:
    """Rows ``idx`` of a tensor (on its device) or of a lazy array (read now, on the CPU)."""
    return x[idx.to(x.device)] if isinstance(x, torch.Tensor) else x[idx]


class NpyArray:
    """A ``.npy`` file (C order) read row by row with ``os.pread``; ``a[i]``, ``a[i:j]`` and ``a[index_tensor]``
    give tensors (uint16/uint32 widened to int32/int64). The file descriptor is opened per process, so worker
    processes forked from this one read through their own."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                version = np.lib.format.read_magic(f)
                shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                         else np.lib.format.read_array_header_2_0(f))
                self.offset = f.tell()
        except (OSError, ValueError) as exc:
            raise ZooError(f"{self.path}: not a readable .npy file ({exc})") from None
        if fortran or dtype.hasobject:
            raise ZooError(f"{self.path}: a Fortran-order or object .npy array; write it C-ordered and plain")
        self.shape, self.dtype = tuple(shape), dtype
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        expected = self.offset + self.row_bytes * (shape[0] if shape else 1)
        if self.path.stat().st_size < expected:
            raise ZooError(f"{self.path}: truncated ({self.path.stat().st_size:,} bytes, the header says {expected:,})")
        self._fd: tuple[int, int] | None = None  # (pid, fd)

    def __len__(self) -> int:
        return self.shape[0]

    def __getstate__(self) -> dict:  # to another process: it opens its own descriptor
        return {**self.__dict__, "_fd": None}

    def _file(self) -> int:
        if self._fd is None or self._fd[0] != os.getpid():
            self._fd = (os.getpid(), os.open(self.path, os.O_RDONLY))
        return self._fd[1]

    def _read(self, start: int, count: int) -> np.ndarray:
        size = count * self.row_bytes
        buf = bytearray(size)
        view, done = memoryview(buf), 0
        while done < size:
            n = os.preadv(self._file(), [view[done:]], self.offset + start * self.row_bytes + done)
            if n == 0:
                raise ZooError(f"{self.path}: ended early at row {start + done // self.row_bytes}")
            done += n
        return np.frombuffer(buf, dtype=self.dtype).reshape(count, *self.shape[1:])

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a.astype(_WIDEN[self.dtype]) if self.dtype in _WIDEN else a)

    def numpy_rows(self, idx) -> np.ndarray:
        """Rows ``idx`` (any shape of integers) as a numpy array of shape ``idx.shape + row shape``."""
        flat = np.asarray(idx, dtype=np.int64).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"{self.path}: row index out of range 0..{len(self) - 1}")
        rows, inverse = np.unique(flat, return_inverse=True)
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        if len(rows):  # one read per contiguous run of rows (a token window, a slice)
            breaks = np.flatnonzero(np.diff(rows) != 1) + 1
            starts, ends = np.r_[0, breaks], np.r_[breaks, len(rows)]
            for a, b in zip(starts, ends):
                out[a:b] = self._read(int(rows[a]), int(b - a))
        return out[inverse].reshape(*np.shape(idx), *self.shape[1:])

    def __getitem__(self, key) -> torch.Tensor:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return self[torch.arange(start, stop, step)]
            return self._tensor(self._read(start, max(0, stop - start)))
        if isinstance(key, (int, np.integer)):
            return self[torch.tensor([int(key)])][0]
        idx = key.cpu().numpy() if isinstance(key, torch.Tensor) else np.asarray(key)
        return self._tensor(self.numpy_rows(idx))


class NpyWriter:
    """Rows appended to a ``.npy`` file whose length is known only at the end; ``close()`` writes the header and
    renames the temp file into place, so a crash never leaves a half-written array under the final name."""

    def __init__(self, path: str | os.PathLike, dtype, row_shape: Sequence[int] = ()):
        self.path, self.dtype, self.row_shape = Path(path), np.dtype(dtype), tuple(row_shape)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self.f = open(self.tmp, "wb")
        self.f.write(b"\0" * HEADER_BYTES)
        self.rows = 0

    def append(self, rows) -> None:
        a = np.ascontiguousarray(rows, dtype=self.dtype)
        if a.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path}: rows of shape {a.shape[1:]}, this array holds {self.row_shape}")
        self.f.write(a.tobytes())
        self.rows += len(a)

    def close(self) -> Path:
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                  "shape": (self.rows, *self.row_shape)}
        text = repr(header).encode("latin1")
        room = HEADER_BYTES - 10 - 1  # magic (6) + version (2) + length (2); the text ends in a newline
        if len(text) > room:
            raise ValueError(f"{self.path}: header too long for {HEADER_BYTES} bytes")
        self.f.seek(0)
        self.f.write(b"\x93NUMPY\x01\x00" + (room + 1).to_bytes(2, "little") + text + b" " * (room - len(text)) + b"\n")
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> NpyWriter:
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class LazyItems:
    """``n`` rows made on demand by ``read(indices: np.ndarray) -> tensor`` (image files decoded, say); ``shape``
    is the full array's, as if it were in memory."""

    def __init__(self, n: int, read: Callable[[np.ndarray], torch.Tensor], row_shape: Sequence[int], dtype):
        self.n, self.read, self.shape, self.dtype = n, read, (n, *row_shape), dtype

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key) -> torch.Tensor:
        if isinstance(key, slice):
            return self.read(np.arange(*key.indices(self.n)))
        if isinstance(key, (int, np.integer)):
            return self.read(np.array([int(key)]))[0]
        return self.read(key.cpu().numpy() if isinstance(key, torch.Tensor) else np.asarray(key))


def rows(x, idx) -> torch.Tensor | LazyItems:
    """A subset of rows: indexed now for a tensor, deferred (read when used) for a lazy array."""
    if isinstance(x, torch.Tensor):
        return x[torch.as_tensor(idx, dtype=torch.long)]
    idx = np.asarray(idx, dtype=np.int64)
    return LazyItems(len(idx), lambda j: x[idx[j]], x.shape[1:], x.dtype)


def mapped(x, fn: Callable[[torch.Tensor], torch.Tensor], row_shape: Sequence[int]):
    """``fn`` over a batch of rows: applied now to a tensor, on every read to a lazy array."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    return LazyItems(len(x), lambda j: fn(x[j]), row_shape, x.dtype)


def chunks(x, size: int, workers: int = 0):
    """``x[i:i + size]`` in order over the rows: a lazy array's chunks read ahead in ``workers`` processes."""
    if not is_lazy(x) or workers <= 0:
        for i in range(0, len(x), size):
            yield x[i:i + size]
        return
    starts = list(range(0, len(x), size))
    loader = torch.utils.data.DataLoader(_Slices(x, size), batch_size=None, sampler=starts, num_workers=workers,
                                         prefetch_factor=2, generator=_own_generator())
    yield from loader


def _own_generator() -> torch.Generator:
    """A loader's own generator: without one, starting its workers draws their seed from torch's global generator,
    and the training's later random draws (dropout, augmentation) would differ from a run without workers."""
    return torch.Generator().manual_seed(0)


class _Slices(torch.utils.data.Dataset):
    def __init__(self, x, size: int):
        self.x, self.size = x, size

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i:i + self.size]


# =============================================================================================
# Prefetching batches in worker processes
# =============================================================================================

class _Positions(torch.utils.data.IterableDataset):
    """The batches a ``TensorBatches`` will hand out from its current position, read in worker processes: worker
    w of W reads every W-th, and the loader returns them in order."""

    def __init__(self, batches, start: tuple[int, int]):
        self.batches, self.start = batches, start

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch, index = self.start
        k = 0
        while True:
            (epoch_now, slot), idx = self.batches.position(epoch, index)
            if k % workers == w:
                yield epoch_now, slot, tuple(take(t, idx) for t in self.batches.tensors)
            epoch, index = self.batches.advance(epoch, index)
            k += 1


class Prefetch:
    """Up to ``2 x workers`` batches read ahead of the one training. Dropped (and restarted from the saved position)
    whenever the position is set from outside: a resume, a new shard."""

    def __init__(self, batches, workers: int):
        self.batches, self.workers = batches, workers
        self._it = None
        self._loader = None

    def reset(self) -> None:
        self._it = self._loader = None

    def next(self, epoch: int, slot: int) -> tuple[torch.Tensor, ...]:
        if self._it is None:
            self._loader = torch.utils.data.DataLoader(
                _Positions(self.batches, (self.batches.epoch, self.batches.index)), batch_size=None,
                num_workers=self.workers, prefetch_factor=2, persistent_workers=False, generator=_own_generator())
            self._it = iter(self._loader)
        got_epoch, got_slot, batch = next(self._it)
        if (got_epoch, got_slot) != (epoch, slot):  # the loader follows the same arithmetic; never expected
            raise RuntimeError(f"prefetch out of step: got batch ({got_epoch}, {got_slot}), wanted ({epoch}, {slot})")
        return batch
