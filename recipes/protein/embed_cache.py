"""The ESM-2 embedding cache on disk: pooled embeddings by sequence, in shards written while embedding runs (every
``CHUNK_SEQUENCES`` sequences or ``CHUNK_SECONDS`` seconds, and when it stops on an exception such as Ctrl-C), so a
run that stops keeps what it embedded and the next run embeds only the rest.

A shard is an ``.npz`` of ``keys`` (sha1 of each sequence) and ``emb`` (float32, a row each), written to a temporary
file and renamed into place, read with ``allow_pickle=False``: reading one never runs code. A shard that does not
read is logged, removed, and its sequences embedded again. The folder is keyed by the weights, layer, pooling and
precision (``esm2.embed``)."""
from __future__ import annotations

import contextlib
import hashlib
import time
import zipfile
from pathlib import Path

import numpy as np

from recipe_zoo.core.checkpoint import replaced

CHUNK_SEQUENCES = 500  # sequences per shard at most ...
CHUNK_SECONDS = 60.0  # ... or this much embedding: the most work a killed run loses


def sequence_key(seq: str) -> str:
    return hashlib.sha1(seq.encode()).hexdigest()


def read_shards(folder: Path, width: int, log) -> dict[str, np.ndarray]:
    """Key -> embedding from every shard in ``folder``; a shard that does not read is logged and removed."""
    found: dict[str, np.ndarray] = {}
    for shard in sorted(folder.glob("shard-*.npz")) if folder.is_dir() else []:
        try:
            with np.load(shard, allow_pickle=False) as f:
                keys, emb = f["keys"], f["emb"]
            if keys.ndim != 1 or emb.shape != (len(keys), width) or emb.dtype != np.float32:
                raise ValueError(f"keys {keys.shape}, embeddings {emb.shape} {emb.dtype}; expected ({len(keys)}, "
                                 f"{width}) float32")
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            log(f"embedding cache shard {shard} unreadable ({detail}): removed, its sequences are embedded again")
            with contextlib.suppress(OSError):
                shard.unlink()
            continue
        found.update(zip(keys.tolist(), emb))
    return found


class ShardWriter:
    """Embeddings buffered as they are made and written as a shard every ``CHUNK_SEQUENCES`` sequences or
    ``CHUNK_SECONDS`` seconds (``add``), and at the end (``flush``)."""

    def __init__(self, folder: Path):
        self.folder, self.keys, self.emb, self.shards = folder, [], [], 0
        self.since = time.monotonic()

    def add(self, keys: list[str], emb: np.ndarray) -> None:
        self.keys += keys
        self.emb.append(emb)
        if len(self.keys) >= CHUNK_SEQUENCES or time.monotonic() - self.since >= CHUNK_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.keys:
            self.folder.mkdir(parents=True, exist_ok=True)
            name = hashlib.sha1("".join(self.keys).encode()).hexdigest()[:12]
            with replaced(self.folder / f"shard-{name}.npz") as tmp, open(tmp, "wb") as f:  # a file: savez adds
                np.savez(f, keys=np.array(self.keys), emb=np.concatenate(self.emb).astype(np.float32))  # no suffix
            self.shards += 1
        self.keys, self.emb, self.since = [], [], time.monotonic()
