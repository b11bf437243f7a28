"""tabular/xgb engine=dask: xgboost.dask on a 2-worker LocalCluster trains the local engine's models on a small
generated table (same keys, the same files, a test RMSE close to engine=local's), ``zoo predict`` reproduces the dask
run's metrics from its saved boosters and ``zoo export`` gives them as XGBoost JSON, and the bad inputs (a scheduler
that does not answer, dask not installed) are one line and exit 2. Wall time on 2 shared cores: 11-14 s for the fast
set, nearly all of it the two module-scoped runs (the dask run: the cluster's start ~3 s with the workers' imports,
~1-2 s a fit, 3 fits). Marked slow: the time budget on the workers (11-16 s) and an existing scheduler (6 s)."""
import json
import socket
import sys

import numpy as np
import pytest

from conftest import bad_input, roundtrip, train_in_process
from houses import houses as houses_table

pytest.importorskip("distributed")

ARGS = ["target=price", "bagging=2", "max_depth=4", "log_target=off"]  # 3 fits: the choice and 2 bagged models


@pytest.fixture(scope="module")
def houses(tmp_path_factory):
    """1,500 housing-like rows: a ratio of counts, coordinates, a text category; price noise 10,000."""
    path = tmp_path_factory.mktemp("dask") / "houses.csv"
    houses_table(np.random.default_rng(0), 1500).drop(columns="id").to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def runs(houses):
    """The same run on both engines, rounds capped (200: early stopping or the cap ends it, not the clock)."""
    out = houses.parent
    return {engine: train_in_process(out / engine, "tabular/xgb", f"data={houses}", *ARGS, f"engine={engine}",
                                     budget="200steps") for engine in ("local", "dask")}


def _summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def test_dask_trains_the_local_models_with_the_same_outputs(runs):
    local, dask = _summary(runs["local"]), _summary(runs["dask"])
    assert dask["status"] == "ok" and set(dask["metrics"]) == set(local["metrics"])
    assert {p.name for p in runs["local"].iterdir()} <= {p.name for p in runs["dask"].iterdir()}
    card = json.loads((runs["dask"] / "model.json").read_text())
    assert card["weights"] == ["xgb_model0.json", "xgb_model1.json"]
    assert card["training"] == {"engine": "dask", "scheduler": "LocalCluster", "workers": 2, "threads": 2}
    assert json.loads((runs["local"] / "model.json").read_text())["training"]["engine"] == "local"
    # The noise is 10,000. The engines differ only in what a cluster changes: quantile sketches merged from the
    # workers' rows and the workers' own row subsamples. Over seeds 0-4 the two engines' test RMSEs were 0.2-0.9%
    # apart (seed 0: local 11,145, dask 11,241), while the seeds of one engine spread over 3.5% (11,145-11,539): a
    # 3% gap would be a real difference, not noise.
    rmse_local, rmse_dask = local["metrics"]["test_rmse"], dask["metrics"]["test_rmse"]
    assert rmse_dask < 13_000 and abs(rmse_dask - rmse_local) / rmse_local < 0.03, (rmse_local, rmse_dask)


def test_predict_and_export_on_the_dask_run(runs, capsys, tmp_path):
    import xgboost as xgb

    from recipe_zoo.cli import main

    result = roundtrip(runs["dask"])  # every metric and row the run reported, from the saved boosters
    assert result.metrics["test_rmse"] == _summary(runs["dask"])["metrics"]["test_rmse"]
    capsys.readouterr()
    assert main(["predict", str(runs["dask"]), "--device", "cpu"]) == 0  # zoo predict RUN_DIR: the run's split
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("test_rmse:"))
    assert line.split()[1] == f"{result.metrics['test_rmse']:g}" and line.endswith(f"(the run's: {line.split()[1]})")
    assert main(["export", str(runs["dask"]), "--format", "xgboost-json", "--out", str(tmp_path / "x")]) == 0
    booster = xgb.Booster()
    booster.load_model(tmp_path / "x" / "xgb_model0.json")  # the boosters the workers trained, as plain XGBoost JSON
    assert booster.num_boosted_rounds() >= int(booster.attr("best_iteration")) + 1


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_scheduler_that_does_not_answer_is_one_line(houses, tmp_path, capfd, monkeypatch):
    """A refused port is not waited on: the plain TCP connect is refused at once, and Dask, which would retry it
    until its timeout, is never asked (made to fail here if it were)."""
    from recipe_zoo.recipes.tabular import dask_engine

    def dask_asked(address):
        raise AssertionError("Dask was asked about a refused port: it retries until its timeout")

    monkeypatch.setattr(dask_engine, "identity", dask_asked)
    address = f"tcp://127.0.0.1:{_closed_port()}"
    bad_input(capfd, ["tabular/xgb", f"data={houses}", *ARGS, "engine=dask", f"scheduler={address}"],
              tmp_path / "runs", f"scheduler={address}", "nothing answers there", "Connection refused")
    bad_input(capfd, ["tabular/xgb", f"data={houses}", *ARGS, "engine=dask", "scheduler=nonsense"], tmp_path / "runs",
              "scheduler=nonsense: not a Dask scheduler address")


def test_dask_not_installed_names_the_extra(houses, tmp_path, capfd, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the extra were not installed
    bad_input(capfd, ["tabular/xgb", f"data={houses}", *ARGS, "engine=dask"], tmp_path / "runs",
              "tabular/xgb engine=dask needs the dask extra (distributed not installed)",
              "pip install 'recipe-zoo[dask]'")


@pytest.mark.slow
def test_a_time_budget_stops_every_worker_together_near_it(houses, tmp_path):
    """--budget 6s where nothing early-stops (bagged models at lr 0.001; 20,000 rounds take minutes on the cluster):
    the workers' all-reduced time limit ends each model, together, the last when the budget is spent, so the run
    ends (no worker left waiting on another) after at least 0.8 x 6 s of training. Above it only each fit's own
    overhead (the cluster's frames, a round in flight, copying the booster back): under 3 x 6 s, a margin of 3x
    for a loaded machine (~6.5 s here). About 12 s (the cluster's start and the scoring are outside the budget)."""
    run_dir = train_in_process(tmp_path, "tabular/xgb", f"data={houses}", *ARGS, "engine=dask", "xgb_lr=0.001",
                               budget="6s")
    summary = _summary(run_dir)
    assert summary["status"] == "ok" and 0.8 * 6 <= summary["train_seconds"] < 3 * 6, summary["train_seconds"]
    log = (run_dir / "log.txt").read_text()
    assert "final: depth 4, lr 0.001, 2 model(s)" in log


@pytest.mark.slow
def test_an_existing_scheduler_is_used_and_left_running(houses, tmp_path):
    """scheduler=ADDRESS: the run uses that cluster (the card names it) and leaves it up. About 8 s."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        run_dir = train_in_process(tmp_path, "tabular/xgb", f"data={houses}", *ARGS, "engine=dask",
                                   f"scheduler={address}", budget="50steps")
        card = json.loads((run_dir / "model.json").read_text())
        assert card["training"] == {"engine": "dask", "scheduler": address, "workers": 2, "threads": 2}
        with Client(address, timeout="5s") as client:
            assert len(client.scheduler_info()["workers"]) == 2


def test_the_local_cluster_listens_on_this_host_only(tmp_path):
    """The dashboard and the scheduler of the cluster engine=dask starts bind to 127.0.0.1, not every interface."""
    from types import SimpleNamespace
    from urllib.parse import urlparse

    import psutil

    from recipe_zoo.recipes.tabular import dask_engine

    run = SimpleNamespace(dir=tmp_path, log=lambda line: None, report=lambda key, value: None)
    with dask_engine.cluster(SimpleNamespace(scheduler="", dask_workers=1), run) as client:
        ports = {urlparse(client.dashboard_link).port, urlparse(client.scheduler.address).port}
        bound = {c.laddr.ip for c in psutil.Process().net_connections("tcp")  # the scheduler runs in this process
                 if c.status == psutil.CONN_LISTEN and c.laddr.port in ports}
    assert bound == {"127.0.0.1"}, bound
