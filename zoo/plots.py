"""Pictures of a run: loss and metric against step and against training time."""
from __future__ import annotations

from pathlib import Path


def plot_curves(train_rows: list[dict], eval_rows: list[dict], metric: str, path: Path, title: str = "") -> None:
    """Training loss (every 1% of the budget) and the metric (each evaluation) against step and time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for col, x_key, x_label in ((0, "step", "step"), (1, "train_seconds", "training time (s)")):
        for row_i, (rows, y_key, y_label) in enumerate(((train_rows, "train_loss", "train loss"),
                                                         (eval_rows, metric, metric))):
            ax = axes[row_i][col]
            ax.plot([r[x_key] for r in rows], [r.get(y_key, float("nan")) for r in rows], marker="o", markersize=3)
            ax.set_xlabel(x_label)
            ax.set_ylabel(y_label)
            ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_board(rows: list[dict], out_dir: Path) -> list[Path]:
    """One bar chart per leaderboard table: mean ± std per recipe, best on top."""
    import re
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recipe_zoo.board import group, label, ranked

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for (bench, _, metric, budget, hardware), table in group(rows).items():
        table = ranked(table)[::-1]
        names = [textwrap.fill(label(r), 48) for r in table]
        lines = sum(n.count("\n") + 1 for n in names)
        fig, ax = plt.subplots(figsize=(12, 0.35 * lines + 0.4 * len(table) + 1.5), constrained_layout=True)
        ax.barh(names, [r["mean"] for r in table], xerr=[r["std"] for r in table], color="#4C72B0", capsize=4)
        ax.tick_params(axis="y", labelsize=8)
        for y, r in enumerate(table):
            ax.text(r["mean"], y, f" {r['mean']:.4f} (n={r['n']})", va="center", fontsize=8)
        ax.set_xlabel(f"{metric} ({'higher' if table[0]['higher_is_better'] else 'lower'} is better)")
        ax.set_title(f"{bench} · {budget} · {hardware}", fontsize=10)
        path = out_dir / (re.sub(r"[^\w.-]+", "_", f"{bench}-{budget}-{hardware}") + ".png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths
