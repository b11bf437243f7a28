"""Optional experiment tracking where people already look: TensorBoard and MLflow.

``--track tensorboard`` writes event files into the run directory; ``--track mlflow`` logs params,
metrics and the run directory as artifacts to the tracking URI the user configured
(``MLFLOW_TRACKING_URI``; a local ``./mlruns`` by default).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from recipe_zoo.core.errors import ZooError

TRACKERS = ("tensorboard", "mlflow")


def _scalars(row: dict) -> dict[str, float]:
    return {k: float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step" and math.isfinite(v)}


class TensorBoardTracker:
    def __init__(self, run_dir: Path, config: dict, name: str):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ZooError("--track tensorboard needs tensorboard: pip install 'recipe-zoo[track]'") from None
        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self.writer.add_text("config", f"```\n{json.dumps(config, indent=2, default=str)}\n```")
        self.writer.add_text("recipe", name)

    def log_metrics(self, row: dict) -> None:
        for key, value in _scalars(row).items():
            self.writer.add_scalar(key, value, global_step=int(row["step"]))
        self.writer.flush()

    def finish(self, summary: dict, run_dir: Path) -> None:
        self.writer.add_text("summary", f"```\n{json.dumps(summary, indent=2, default=str)}\n```")
        self.writer.close()


class MLflowTracker:
    def __init__(self, run_dir: Path, config: dict, name: str):
        try:
            import mlflow
        except ImportError:
            raise ZooError("--track mlflow needs mlflow: pip install 'recipe-zoo[track]' (or mlflow)") from None
        import os

        self.mlflow = mlflow
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            # Nothing configured: a local ./mlruns file store, no server and no database needed.
            # MLflow 3 keeps that store in maintenance mode and asks for this opt-in.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri(Path("mlruns").resolve().as_uri())
        try:
            mlflow.set_experiment(name)
            self.run = mlflow.start_run(run_name=run_dir.name)
        except Exception as exc:  # unreachable server, unsupported store: say where and why, in one line
            raise ZooError(f"--track mlflow: cannot start a run at {mlflow.get_tracking_uri()}: "
                           f"{str(exc).splitlines()[0][:200]}") from None
        mlflow.log_params({k: str(v)[:500] for k, v in config.items()})
        mlflow.set_tags({"zoo.recipe": name, "zoo.run_dir": str(run_dir)})

    def log_metrics(self, row: dict) -> None:
        self.mlflow.log_metrics(_scalars(row), step=int(row["step"]))

    def finish(self, summary: dict, run_dir: Path) -> None:
        self.mlflow.set_tag("zoo.status", summary["status"])
        self.mlflow.log_artifacts(str(run_dir))
        status = {"ok": "FINISHED", "interrupted": "KILLED"}.get(summary["status"], "FAILED")
        self.mlflow.end_run(status=status)


def open_trackers(kinds: list[str], run_dir: Path, config: dict, name: str) -> list:
    unknown = [k for k in kinds if k not in TRACKERS]
    if unknown:
        raise ZooError(f"--track {unknown[0]}: choose from {', '.join(TRACKERS)}")
    classes = {"tensorboard": TensorBoardTracker, "mlflow": MLflowTracker}
    return [classes[k](run_dir, config, name) for k in dict.fromkeys(kinds)]
