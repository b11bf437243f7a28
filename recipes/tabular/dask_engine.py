"""``tabular/xgb engine=dask``: the same models, trained by ``xgboost.dask`` on a Dask cluster. ``scheduler=ADDRESS``
names an existing cluster; without it the recipe starts a ``distributed.LocalCluster`` of ``dask_workers`` worker
processes (one thread each) and closes it at the end.

The recipe's protocol is unchanged (``xgb.fit_xgb``): the same rows, the same parameters, depth and target transform
chosen on validation, bagged models each early-stopped on its own fold. Only where a model is fitted changes: each
fit sends its rows to the workers as a Dask dataframe, XGBoost builds a ``DaskQuantileDMatrix`` there and the workers
boost together (histograms all-reduced); the fitted booster comes back as the scikit-learn wrapper the local engine
returns, so scoring, the saved XGBoost JSON, ``zoo predict`` and ``zoo export`` are the local engine's. The time
budget is a callback on every worker whose stop decision is all-reduced: the workers always stop on the same round.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from recipe_zoo.core.errors import ZooError

CONNECT_SECONDS = 5  # how long an unreachable scheduler (or one without workers) is waited for
MODULES = ("dask", "distributed")
LABEL, WEIGHT = "__zoo_label__", "__zoo_weight__"
WORKER_LOG = "dask_workers.log"  # the LocalCluster workers' stderr, in the run directory


def installed(module: str) -> bool:
    if module in sys.modules:  # None there: a module known to be absent
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def require_dask() -> None:
    missing = [m for m in MODULES if not installed(m)]
    if missing:
        raise ZooError(f"tabular/xgb engine=dask needs the dask extra ({', '.join(missing)} not installed): "
                       "pip install 'recipe-zoo[dask]'")


@contextlib.contextmanager
def cluster(cfg, run):
    """A ``distributed.Client`` on ``cfg.scheduler``, or on a LocalCluster started here (closed on the way out).
    An address that does not answer, or a cluster without workers, is one line naming the address."""
    require_dask()
    import logging

    from distributed import Client, LocalCluster

    start, local = time.perf_counter(), None
    if cfg.scheduler:
        client = connect(cfg.scheduler)
    else:
        local = LocalCluster(n_workers=cfg.dask_workers, threads_per_worker=1, processes=True,
                             dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)  # this host only, a free port
        client = Client(local, set_as_default=False)
        client.run(stderr_to, str(run.dir / WORKER_LOG))
    try:
        try:
            client.wait_for_workers(1, timeout=CONNECT_SECONDS)
        except TimeoutError:
            raise ZooError(f"scheduler={cfg.scheduler}: the scheduler has no workers (waited {CONNECT_SECONDS} s)"
                           ) from None
        client.run(warm_up)
        workers = client.scheduler_info()["workers"]
        run.log(f"dask: {cfg.scheduler or 'a LocalCluster'} of {len(workers)} workers, "
                f"{sum(w['nthreads'] for w in workers.values())} threads in all, up in "
                f"{time.perf_counter() - start:.1f} s")
        yield client
        report_workers(client, run)
    finally:
        with contextlib.suppress(Exception):
            client.close()
        if local is not None:
            with contextlib.suppress(Exception):
                local.close()


def connect(address: str):
    """A client on an existing scheduler, or one line naming the address: not an address, nothing listening (a TCP
    connect first: Dask itself would retry a refused port until its timeout), or no Dask scheduler answering (its
    ``identity`` asked before a Client is made: a Client that fails to start hangs the interpreter's exit)."""
    import socket

    from distributed import Client
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except ValueError as exc:
        raise ZooError(f"scheduler={address}: not a Dask scheduler address ({exc}); e.g. tcp://host:8786") from None
    if scheme == "tcp":
        try:
            socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
        except OSError as exc:
            raise ZooError(f"scheduler={address}: nothing answers there within {CONNECT_SECONDS} s "
                           f"({exc.strerror or type(exc).__name__})") from None
    try:
        kind = asyncio.run(identity(address)).get("type")
    except MemoryError:  # another server's first bytes read as a frame's size
        kind = None
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise ZooError(f"scheduler={address}: no Dask scheduler answered within {CONNECT_SECONDS} s ({first})"
                       ) from None
    if kind != "Scheduler":
        raise ZooError(f"scheduler={address}: something answers there, but not a Dask scheduler"
                       + (f" (a Dask {kind})" if kind else ""))
    return Client(address, timeout=f"{CONNECT_SECONDS}s", set_as_default=False)


async def identity(address: str) -> dict:
    from distributed.core import rpc

    async with rpc(address, timeout=CONNECT_SECONDS) as remote:
        return await asyncio.wait_for(remote.identity(), CONNECT_SECONDS)


def warm_up() -> None:
    """In each worker: the libraries a fit uses, imported before the clock starts (a first fit took 3-4 s more)."""
    import dask.dataframe  # noqa: F401
    import xgboost  # noqa: F401


def stderr_to(path: str) -> None:
    """In a worker of the LocalCluster started here: its stderr (fd 2) appended to ``path`` in the run. XGBoost's
    C++ writes "Task ... got rank N" there on every fit; the workers' errors still come back through Dask."""
    import os

    os.dup2(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644), 2)


def describe(cfg, client) -> dict:
    """What the card records of the engine."""
    workers = client.scheduler_info()["workers"]
    return {"engine": "dask", "scheduler": cfg.scheduler or "LocalCluster", "workers": len(workers),
            "threads": sum(w["nthreads"] for w in workers.values())}


def report_workers(client, run) -> None:
    """The workers' peak RSS: the summary's peak_mem_mb is this process's, and the rows live on the workers."""
    def peak_mb() -> float:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    with contextlib.suppress(Exception):
        peaks = client.run(peak_mb)
        run.report("dask_workers_peak_mem_mb", " ".join(f"{v:.0f}" for v in peaks.values()))


# =============================================================================================
# One fit on the cluster
# =============================================================================================

def fitter(client, table, X, params, sample_weights):
    """``fit(depth, lr, seed, seconds, rounds, train, y_train, held, y_held)`` as ``xgb.local_fitter``'s, on the
    cluster: ``params(depth, lr, seed, rounds)`` are the local engine's parameters (XGBoost's threads: the
    workers'), ``sample_weights(rows)`` the training rows' weights or None."""
    import xgboost.dask as dxgb

    parts = max(1, len(client.scheduler_info()["workers"]))
    kind = dxgb.DaskXGBRegressor if table.task == "regression" else dxgb.DaskXGBClassifier

    def frame(rows: np.ndarray, y: np.ndarray, w: np.ndarray | None):
        import dask.dataframe as dd

        part = X.iloc[rows].reset_index(drop=True)
        part[LABEL] = y
        if w is not None:
            part[WEIGHT] = w
        ddf = dd.from_pandas(part, npartitions=min(parts, len(rows)), sort=False)  # one frame: rows stay aligned
        return ddf.drop(columns=[c for c in (LABEL, WEIGHT) if c in ddf.columns]), ddf[LABEL], \
            (ddf[WEIGHT] if w is not None else None)

    def fit(depth, lr, seed, seconds, rounds, train, y_train, held, y_held):
        X_tr, y_tr, w_tr = frame(train, y_train, sample_weights(train))
        X_va, y_va, _ = frame(held, y_held, None)
        model = kind(**params(depth, lr, seed, rounds),
                     callbacks=[time_limit(seconds)] if seconds is not None else None)
        model.client = client
        with client.as_current():
            model.fit(X_tr, y_tr, sample_weight=w_tr, eval_set=[(X_va, y_va)], verbose=False)
        return local_copy(model, table.task)

    return fit


def local_copy(model, task: str):
    """The fitted booster as the local scikit-learn wrapper (``xgb.load_models`` reads the saved files the same
    way): best_iteration and the classes come with its JSON."""
    import xgboost as xgb

    copy = xgb.XGBRegressor() if task == "regression" else xgb.XGBClassifier()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.json"
        model.save_model(path)
        copy.load_model(path)
    return copy


def time_limit(seconds: float):
    """``core.budget.xgboost_time_limit`` for several workers: each worker measures its own boosting time and the
    stop is all-reduced (max), so every worker stops on the same round (one stopping alone would leave the others
    waiting on it). Defined inside this function so that cloudpickle sends the class by value: the workers of an
    existing cluster need XGBoost, not the zoo."""
    import xgboost as xgb
    from xgboost import collective

    class TimeLimit(xgb.callback.TrainingCallback):
        def before_training(self, model):
            self.start = time.perf_counter()
            return model

        def after_iteration(self, model, epoch, evals_log):
            over = np.array([epoch > 0 and time.perf_counter() - self.start > seconds], dtype=np.int32)
            if collective.is_distributed():
                over = collective.allreduce(over, collective.Op.MAX)
            return bool(over[0])

    return TimeLimit()
