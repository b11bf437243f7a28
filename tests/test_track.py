"""--track tensorboard / mlflow write where those tools read (both local, no server)."""
import pytest

from conftest import summary_block, zoo, zoo_in_process

ARGS = ["vision/resnet", "width=8", "eval_every=0.5", "--budget", "4steps"]


def test_tensorboard_scalars_and_config(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    proc = zoo("run", *ARGS, "--out", tmp_path / "runs", "--track", "tensorboard")
    assert proc.returncode == 0, proc.stderr
    run_dir = summary_block(proc.stdout)["run_dir"]
    events = EventAccumulator(f"{run_dir}/tensorboard")
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train_loss", "lr", "grad_norm", "val_accuracy", "val_macro_f1"} <= tags
    assert [e.step for e in events.Scalars("val_accuracy")] == [2, 4]
    assert "config/text_summary" in events.Tags()["tensors"]


@pytest.mark.slow
def test_mlflow_params_metrics_artifacts(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_ALLOW_FILE_STORE": "true"}
    proc = zoo("run", *ARGS, "--out", tmp_path / "runs", "--track", "mlflow", env=env)
    assert proc.returncode == 0, proc.stderr
    client = MlflowClient(tracking_uri=uri)
    (exp,) = [e for e in client.search_experiments() if e.name == "vision/resnet"]
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.params["width"] == "8" and run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")] == [2, 4]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "metrics.csv", "config.json"} <= artifacts


def test_unknown_tracker_is_rejected(tmp_path):
    proc = zoo_in_process("run", *ARGS, "--out", tmp_path / "runs", "--track", "wandb")
    assert proc.returncode == 2 and "invalid choice: 'wandb'" in proc.stderr
