"""Pictures of a run: loss and metric against step and against training time."""
from __future__ import annotations

from pathlib import Path


def plot_curves(rows: list[dict], metric: str, path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for col, x_key, x_label in ((0, "step", "step"), (1, "train_seconds", "training time (s)")):
        x = [r[x_key] for r in rows]
        for row_i, (y_key, y_label) in enumerate((("train_loss", "train loss"), (metric, metric))):
            ax = axes[row_i][col]
            y = [r.get(y_key, float("nan")) for r in rows]
            ax.plot(x, y, marker="o", markersize=3)
            ax.set_xlabel(x_label)
            ax.set_ylabel(y_label)
            ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    plt.close(fig)
