"""Pictures of a run: loss and metric against step and against training time."""
from __future__ import annotations

from pathlib import Path


def plot_curves(train_rows: list[dict], eval_rows: list[dict], metric: str, path: Path, title: str = "") -> None:
    """Training and validation loss, the validation metric and the learning rate against step, and the training
    loss against training time: what the checklist says to watch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = metric.removeprefix("test_").removeprefix("val_")
    keys = {k for r in eval_rows for k in r}
    shown = next((k for k in (f"val_{base}", metric, base) if k in keys), metric)
    val_loss = next((k for k in ("val_loss", "val_train_loss") if k in keys),
                    next((k for k in sorted(keys) if k.startswith("val_") and k.endswith("loss")), None))
    # fixed margins: matplotlib's constrained layout measured every label's box and took 40% of the drawing time,
    # which is most of a short run's last second
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    fig.subplots_adjust(left=0.07, right=0.985, bottom=0.07, top=0.91, wspace=0.2, hspace=0.32)

    def line(ax, rows, x, y, label, **kw):
        points = [(r[x], r[y]) for r in rows if isinstance(r.get(y), (int, float)) and r.get(x) is not None]
        if points:
            ax.plot(*zip(*points), label=label, marker="o" if len(points) < 30 else None, markersize=3, **kw)

    line(axes[0][0], train_rows, "step", "train_loss", "train (every 1% of the budget)")
    if val_loss:
        line(axes[0][0], eval_rows, "step", val_loss, f"validation ({val_loss})")
    axes[0][0].set(xlabel="step", ylabel="loss", title="loss")
    line(axes[0][1], eval_rows, "step", shown, shown, color="C2")
    axes[0][1].set(xlabel="step", ylabel=shown, title=f"{shown} at each evaluation")
    line(axes[1][0], train_rows, "step", "lr", "group 0", color="C3")
    axes[1][0].set(xlabel="step", ylabel="learning rate", title="learning rate (as applied)")
    line(axes[1][1], train_rows, "train_seconds", "train_loss", "train", color="C0")
    axes[1][1].set(xlabel="training time (s)", ylabel="train loss", title="loss against time")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(title)
    save_png(fig, path)
    plt.close(fig)


def plot_compare(curves: list[dict], path: Path, title: str = "") -> None:
    """Runs side by side (``zoo compare --plot``): the training loss against step and against training time, and
    the validation metric at each evaluation. ``curves``: per run its ``label``, ``train`` and ``eval`` rows
    (train.csv, metrics.csv) and ``metric`` (its summary's, e.g. test_accuracy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = -(-len(curves) // 3)  # the legend's, below the panels
    height = 4.4 + 0.25 * lines
    fig, axes = plt.subplots(1, 3, figsize=(15, height))
    fig.subplots_adjust(left=0.05, right=0.99, bottom=(0.6 + 0.25 * lines) / height, top=1 - 0.75 / height,
                        wspace=0.22)
    shown_names = []
    for i, run in enumerate(curves):
        colour = f"C{i % 10}"
        base = run["metric"].removeprefix("test_").removeprefix("val_")
        keys = {k for r in run["eval"] for k in r}
        shown = next((k for k in (f"val_{base}", run["metric"], base) if k in keys), None)
        for ax, rows, x, y in ((axes[0], run["train"], "step", "train_loss"),
                               (axes[1], run["train"], "train_seconds", "train_loss"),
                               (axes[2], run["eval"], "step", shown)):
            points = [(r[x], r[y]) for r in rows if isinstance(r.get(y), (int, float)) and
                      isinstance(r.get(x), (int, float))] if y else []
            if points:
                ax.plot(*zip(*points), color=colour, label=run["label"], marker="o" if len(points) < 30 else None,
                        markersize=3)
        if shown and shown not in shown_names:
            shown_names.append(shown)
    axes[0].set(xlabel="step", ylabel="train loss", title="training loss")
    axes[1].set(xlabel="training time (s)", ylabel="train loss", title="training loss against time")
    metric = " / ".join(shown_names) or "validation metric"
    axes[2].set(xlabel="step", ylabel=metric, title=f"{metric} at each evaluation")
    for ax in axes:
        ax.grid(alpha=0.3)
    legend = {}  # label: line, over the three panels (a run with evaluations but no train.csv is still named)
    for ax in axes:
        legend.update(zip(*ax.get_legend_handles_labels()[::-1]))
    if legend:  # one legend for the three panels, below them: long labels never cover a curve
        fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=min(len(legend), 3), fontsize=9,
                   frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(title or f"{len(curves)} runs compared", fontsize=11)
    save_png(fig, path)
    plt.close(fig)


def plot_board(rows: list[dict], out_dir: Path) -> list[Path]:
    """One chart per leaderboard table: each row's mean with its seed std (thick) and its test-set interval
    (thin, where it has one), best on top, the axis zoomed to the data rather than starting at zero."""
    import re
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recipe_zoo.board import group, interval, label, ranked, value_text

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for (proto, bench, _, metric, budget, hardware), table in group(rows).items():
        table = ranked(table)[::-1]
        names = [textwrap.fill(label(r), 48) for r in table]
        lines = sum(n.count("\n") + 1 for n in names)
        fig, ax = plt.subplots(figsize=(12, 0.35 * lines + 0.4 * len(table) + 1.5), constrained_layout=True)
        y = range(len(table))
        means = [r["mean"] for r in table]
        spans = [interval(r) for r in table]
        ax.errorbar(means, y, xerr=[[m - lo for m, (lo, _) in zip(means, spans)],
                                    [hi - m for m, (_, hi) in zip(means, spans)]],
                    fmt="none", ecolor="#999999", elinewidth=1, capsize=3, label="test 95% (or 2 seed errors)")
        ax.errorbar(means, y, xerr=[r["std"] for r in table], fmt="o", color="#4C72B0", elinewidth=3, capsize=0,
                    label="mean ± seed std")
        ax.set_yticks(list(y), names, fontsize=8)
        for i, r in enumerate(table):
            ax.annotate(f" {value_text(r)}" + (f" n={r['n']}" if r["n"] > 1 else ""), (r["mean"], i),
                        xytext=(4, 6), textcoords="offset points", fontsize=7)
        low, high = min(lo for lo, _ in spans), max(hi for _, hi in spans)
        pad = 0.15 * (high - low) or 0.05 * abs(high) or 0.01
        ax.set_xlim(low - pad, high + pad)
        ax.set_xlabel(f"{metric} ({'higher' if table[0]['higher_is_better'] else 'lower'} is better)")
        ax.set_title(f"{bench} · {budget} · {hardware}" + (f" · protocol {proto}" if proto < 2 else ""), fontsize=10)
        ax.set_ylim(-0.6, len(table) - 0.4)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: never over a row
        ax.grid(axis="x", alpha=0.3)
        path = out_dir / (re.sub(r"[^\w.-]+", "_", f"{bench}-{budget}-{hardware}-p{proto}") + ".png")
        save_png(fig, path)
        plt.close(fig)
        paths.append(path)
    return paths


def save_png(fig, path: Path) -> None:
    """The figure as PNG, replaced whole (``checkpoint.replaced``): a full disk leaves the old chart, not half."""
    from recipe_zoo.core.checkpoint import replaced

    with replaced(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
