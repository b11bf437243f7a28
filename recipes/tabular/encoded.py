"""``tabular/mlp stream=true``: the network's input written to disk once, then read a batch at a time.

``stream.prepare`` reads the table a chunk at a time (the split, column types and feature plans as ``tabular/xgb
stream=true`` has them). Each split's encoding (medians, z-scores or quantiles, category indices) is fitted on the
sample's training rows: on a table up to ``stream.SAMPLE_ROWS`` rows, exactly ``stream=false``'s. A second pass
encodes every row as the network reads it into two ``.npy`` arrays in the run's folder (numbers float32, categories
int64); training batches, validation and the test read their rows from them (``NpyArray``), so a process holds a
batch, the sample and a few numbers a row (target, weight). Up to ``SAMPLE_ROWS`` rows the run is bitwise
``stream=false``'s. The arrays are deleted when the run ends.
"""
from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import numpy as np

from recipe_zoo.core import distributed
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.progress import Progress
from recipe_zoo.core.streams import NpyArray, NpyWriter
from recipe_zoo.recipes.tabular import models, stream

FOLDER = ".encoded"  # in the run's folder, while it trains


@contextlib.contextmanager
def workspace(run):
    """The folder the splits' arrays are written to: the main process's run folder (the others' are scratch), so
    under torchrun on several machines it is on the filesystem they share, as ``--out`` is. Removed when the run
    ends (after every process is done with it, when it ends well)."""
    folder = Path(distributed.broadcast_object(str(run.dir / FOLDER)))
    try:
        yield folder
        distributed.barrier()
    finally:
        if distributed.is_main():
            shutil.rmtree(folder, ignore_errors=True)


def encoder(cfg, run, table: stream.StreamTable, view: tuple, folder: Path):
    """``encode(X, fit_rows) -> (encoding, Encoded)`` for ``mlp.fit_nn``: fitted on the sample's rows among
    ``fit_rows``, every row of the file encoded to ``folder`` (by the main process; the others wait, then read)."""

    def encode(X, fit_rows: np.ndarray):
        inside = np.searchsorted(table.sample, fit_rows[np.isin(fit_rows, table.sample)])  # fit_rows' order kept
        encoding = models.fit_encoding(X, inside, cfg.quantile, run.seed)
        if distributed.is_main():
            write(table, view, encoding, folder, run.log)
        distributed.barrier()
        cards = [len(seen) + 1 for seen in encoding["categories"].values()]
        return encoding, models.Encoded(NpyArray(folder / "num.npy"), NpyArray(folder / "cat.npy"), cards)

    return encode


def write(table: stream.StreamTable, view: tuple, encoding: dict, folder: Path, log) -> None:
    """Every row of the table, featured by the split's plan and encoded, appended a chunk at a time."""
    start, n = time.perf_counter(), len(table.y)
    progress = Progress(n, "stream: encoding rows", log, unit="rows")
    with contextlib.ExitStack() as stack:
        num = cat = None
        for X, _ in stream.featured(table, view[4], np.arange(n), stream.bank_rows(table, view[1])):
            enc = models.encode(X, encoding)
            if num is None:
                num = stack.enter_context(NpyWriter(folder / "num.npy", np.float32, enc.num.shape[1:]))
                cat = stack.enter_context(NpyWriter(folder / "cat.npy", np.int64, enc.cat.shape[1:]))
            num.append(enc.num.numpy())
            cat.append(enc.cat.numpy())
            progress.update(len(X))
        written = num.rows
    if written != n:  # the file changed since it was scanned
        raise ZooError(f"{table.name}: {written} rows read now, {n} when it was scanned: the file changed during "
                       "the run")
    seconds = time.perf_counter() - start
    size = sum(f.stat().st_size for f in folder.glob("*.npy")) / 2**20
    log(f"stream: {n} rows encoded in {seconds:.1f} s ({n / seconds:,.0f} rows/s) into "
        f"{folder.parent.name}/{folder.name} ({size:,.1f} MB)")
