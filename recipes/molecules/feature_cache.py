"""Molecule features cached on disk in chunks, written as they are made: a run stopped while featurising (a crash,
Ctrl-C) keeps every chunk it finished, and the next run featurises only the rest.

The cache is ``~/.cache/zoo/features/<kind>-v<features>.<layout>-<digest>/``: the digest is of the table's canonical
SMILES, the features version is ``features.FEATURE_VERSION`` (the one a trained run's card records) and the layout is
``CACHE_LAYOUT``. Each file holds molecules ``start:stop`` of the table as safetensors, written to a temporary file
and renamed into place; safetensors holds tensors only, so reading a cache file never runs code. A file that does
not read, or does not hold its molecules, is logged and featurised again. Features do not depend on the chunking
(each molecule's are computed on its own), so a resumed table is bitwise the table made in one go.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core.checkpoint import read_weights, replaced
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.progress import Progress
from recipe_zoo.recipes.molecules.features import FEATURE_VERSION, Graphs
from recipe_zoo.recipes.molecules.table import MolTable, canonical_smiles

CACHE_LAYOUT = "1"  # the files' layout (1: a folder of safetensors chunks; before, one torch file per kind); bump
# it when the layout changes, FEATURE_VERSION when the features do
CHUNK = 1000  # molecules per cache file: the most work a stopped run loses (descriptors: ~5 s of CPU)
BATCH = 100  # molecules featurised between progress checks


def cache_dir(kind: str, table: MolTable) -> Path:
    """Where ``cached`` keeps a feature kind of these molecules, keyed by their content."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo" / "features"
    digest = hashlib.sha256("\n".join(canonical_smiles(table)).encode()).hexdigest()[:16]
    return root / f"{kind}-v{FEATURE_VERSION}.{CACHE_LAYOUT}-{digest}"


def chunk_path(folder: Path, start: int, stop: int) -> Path:
    return folder / f"{start:07d}-{stop:07d}.safetensors"


def cached(kind: str, table: MolTable, make, log, chunk: int = CHUNK):
    """``make(mols)`` over ``table.mols`` (a ``Graphs`` or an array with a row per molecule), ``chunk`` molecules at
    a time: each chunk read from the cache, or made and written there as soon as it is done."""
    folder, n = cache_dir(kind, table), len(table.mols)
    if n == 0:
        return make([])
    ranges = [(a, min(a + chunk, n)) for a in range(0, n, chunk)]
    parts = {a: read_chunk(chunk_path(folder, a, b), b - a, log) for a, b in ranges}
    todo = [(a, b) for a, b in ranges if parts[a] is None]
    if not todo:
        log(f"{kind}: all {n} molecules from the cache {folder}")
    else:
        start, total = time.perf_counter(), sum(b - a for a, b in todo)
        progress = Progress(total, f"featurising ({kind})", log, "molecules")  # a line every 5 s; the end: below
        folder.mkdir(parents=True, exist_ok=True)
        for a, b in todo:
            pieces = []
            for i in range(a, b, BATCH):
                pieces.append(tensors(make(table.mols[i:min(i + BATCH, b)])))
                progress.update(min(i + BATCH, b) - i)
            parts[a] = join(pieces)
            write_chunk(chunk_path(folder, a, b), parts[a])
        seconds = time.perf_counter() - start
        log(f"{kind}: featurised {total} molecules in {seconds:.1f}s ({total / max(seconds, 1e-9):.0f}/s; "
            f"{n - total} from the cache {folder})")
    joined = join([parts.pop(a) for a, _ in ranges])
    return Graphs(**joined) if "x" in joined else joined["array"].numpy()


GRAPH_FIELDS = tuple(f.name for f in dataclasses.fields(Graphs))
POINTERS = ("atom_ptr", "edge_ptr")  # molecule i owns rows ptr[i]:ptr[i+1]; each chunk's start at 0


def tensors(value) -> dict[str, torch.Tensor]:
    """Features as the named tensors a chunk file holds: a ``Graphs``' fields, or an array as ``array``."""
    if isinstance(value, Graphs):
        return {f: getattr(value, f).contiguous() for f in GRAPH_FIELDS}
    return {"array": torch.from_numpy(np.ascontiguousarray(value))}


def join(parts: list[dict]) -> dict[str, torch.Tensor]:
    """Chunks' tensors, in order, joined by row into new tensors, offsets shifted (``src``/``dst`` are atom indices
    within a molecule: unchanged). ``parts`` is emptied as it is copied, so a chunk read from its file (mapped, not
    loaded) is in memory only while it is copied: the peak is the result and one chunk."""
    if len(parts) == 1:
        return parts.pop()
    first = parts[0]
    rows = {k: sum(len(p[k]) for p in parts) - (len(parts) - 1 if k in POINTERS else 0) for k in first}
    out = {k: torch.empty((rows[k], *t.shape[1:]), dtype=t.dtype) for k, t in first.items()}
    del first
    at = {k: int(k in POINTERS) for k in out}  # the pointers' leading 0 is written once
    for k in POINTERS:
        if k in out:
            out[k][0] = 0
    while parts:
        part = parts.pop(0)
        for k, t in part.items():
            rows_in = t[1:] + out[k][at[k] - 1] if k in POINTERS else t
            out[k][at[k]:at[k] + len(rows_in)] = rows_in
            at[k] += len(rows_in)
        del part  # the last reference: a chunk file's mapping closes here
    return out


def write_chunk(path: Path, value: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    with replaced(path) as tmp:
        save_file(value, str(tmp))


def read_chunk(path: Path, n: int, log) -> dict[str, torch.Tensor] | None:
    """The tensors of ``n`` molecules' features in ``path`` (mapped from the file: read when used); None when there
    is no such file, or (logged) when it does not read or holds other than ``n`` molecules."""
    if not path.is_file():
        return None
    try:
        state = read_weights(path)  # safetensors: tensors only, nothing in the file runs
        if _holds(state, n):
            return state
        problem = f"not the features of {n} molecules"
    except ZooError as exc:
        problem = str(exc).removeprefix(f"{path}: ").replace("cannot read weights", "unreadable")
    log(f"feature cache {path}: {problem}; featurised again")
    return None


def _holds(state: dict, n: int) -> bool:
    if set(state) == {"array"}:
        return len(state["array"]) == n
    if set(state) != set(GRAPH_FIELDS) or any(state[k].shape != (n + 1,) for k in POINTERS):
        return False
    atoms, edges = int(state["atom_ptr"][-1]), int(state["edge_ptr"][-1])
    return len(state["x"]) == atoms and len(state["edge_attr"]) == len(state["src"]) == len(state["dst"]) == edges
