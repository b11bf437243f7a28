"""Pictures of a finished run drawn from its ``predictions.csv``: ``confusion.png`` where it predicts classes,
``pred_vs_true.png`` where it predicts numbers. The execution's plot hook calls ``draw`` on the main process after
the run (not with ``ZOO_PLOTS=0``); a picture that cannot be drawn is a warning in the log, never a failed run.

Which columns are a truth and its prediction is each domain's convention, read from the file's header (with the
task the run's ``model.json`` states, where the values alone cannot say it):

- vision, contrastive: ``label`` and ``predicted`` (or the kNN's ``knn_prediction``);
- tabular: ``<target>`` and ``predicted_<target>`` (with ``prob_<class>`` beside class predictions);
- molecules: per target ``<t>`` and ``pred_<t>`` (a value) or ``prob_<t>`` (a probability of 1, read at 0.5);
- protein: ``target`` and ``prediction`` (a value or a class), or zero-shot's ``score`` (ranked, not a value).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_CLASSES = 40  # beyond it a matrix's cells are too small to read
MAX_PANELS = 12


@dataclass
class Panel:
    name: str  # what the panel is of: the target, or "" for a run's one prediction
    truth: str  # column of the true value
    pred: str  # column of the prediction
    kind: str  # "classes", "binary" (a probability of 1 read at 0.5), "values" or "ranks" (a score, not a value)


def panels(columns: list[str], card: dict) -> list[Panel]:
    """The (truth, prediction) column pairs of a predictions.csv header; ``card``: the run's model.json (its task
    says whether a tabular or protein prediction is a class or a value)."""
    cols, task = set(columns), str(card.get("task", ""))
    values = "values" if task == "regression" else "classes"
    out = []
    if "label" in cols:
        out += [Panel("", "label", p, "classes") for p in ("predicted", "knn_prediction") if p in cols][:1]
    if "target" in cols and "prediction" in cols:
        out.append(Panel("", "target", "prediction", values))
    elif "target" in cols and "score" in cols and task == "zero-shot":
        out.append(Panel("", "target", "score", "ranks"))
    tabular = any(c.startswith("predicted_") for c in cols)  # its prob_<class> columns are no targets
    for c in columns:
        for prefix, kind in (("predicted_", values), ("pred_", "values"), ("prob_", "binary")):
            name = c.removeprefix(prefix)
            if c.startswith(prefix) and name in cols and name != c and not (prefix == "prob_" and tabular):
                out.append(Panel(name, name, c, kind))
                break
    return out


def read_table(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _class_name(text: str) -> str:
    """A 0/1 target as written ("1.0") named as its class ("1")."""
    value = _number(text)
    return str(int(value)) if value in (0.0, 1.0) else text


def pairs(rows: list[dict], panel: Panel) -> tuple[list, list]:
    """The rows' (truth, prediction) of a panel, rows with either blank left out (a molecule's unmeasured target):
    classes as strings, values as floats."""
    truth, pred = [], []
    for r in rows:
        t, p = r.get(panel.truth), r.get(panel.pred)
        if t in (None, "") or p in (None, ""):
            continue
        if panel.kind in ("values", "ranks"):
            t, p = _number(t), _number(p)
            if math.isnan(t) or math.isnan(p):
                continue
        elif panel.kind == "binary":
            t, p = _class_name(t), "1" if _number(p) > 0.5 else "0"
        truth.append(t)
        pred.append(p)
    return truth, pred


def class_order(truth: list[str], pred: list[str], classes=None) -> list[str]:
    """The card's classes where it has them (every one seen among them), else the seen ones, numbers by value."""
    seen = set(truth) | set(pred)
    if classes and seen <= {str(c) for c in classes}:
        return [str(c) for c in classes]
    return sorted(seen, key=lambda c: (math.isnan(_number(c)), _number(c), c))


def confusion_matrix(truth: list[str], pred: list[str], classes: list[str]) -> np.ndarray:
    """Counts: row i, column j = items of true class i predicted as class j."""
    index = {c: i for i, c in enumerate(classes)}
    matrix = np.zeros((len(classes), len(classes)), dtype=np.int64)
    for t, p in zip(truth, pred):
        matrix[index[t], index[p]] += 1
    return matrix


def draw_run(run) -> list[Path]:
    """A finished run's pictures (the main process's, after its summary): curves.png where it evaluated, then those
    of its predictions.csv; what was written."""
    title = f"{run.spec.name} on {run.benchmark}"
    written = []
    if run.eval_rows:
        from recipe_zoo.plots import plot_curves

        try:
            plot_curves(run.train_rows or run.eval_rows, run.eval_rows, run.metric, run.dir / "curves.png",
                        title=title)
            written.append(run.dir / "curves.png")
        except Exception as exc:  # a picture must never turn a finished run into a crash
            run.log(f"warning: could not draw curves.png: {exc}")
    return written + draw(run.dir, run.log, title)


def draw(run_dir: Path, log, title: str = "") -> list[Path]:
    """confusion.png and/or pred_vs_true.png of a run with a predictions.csv; what was written. A failure is a
    ``warning:`` line through ``log``."""
    path = Path(run_dir) / "predictions.csv"
    if not path.is_file():
        return []
    written = []
    try:
        import json

        card_path = Path(run_dir) / "model.json"
        card = json.loads(card_path.read_text()) if card_path.is_file() else {}
        columns, rows = read_table(path)
        found = panels(columns, card if isinstance(card, dict) else {})
        groups = {"confusion.png": [p for p in found if p.kind in ("classes", "binary")],
                  "pred_vs_true.png": [p for p in found if p.kind in ("values", "ranks")]}
    except Exception as exc:  # a picture must never turn a finished run into a crash
        log(f"warning: could not read {path} for its pictures: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return []
    for name, chosen in groups.items():
        if not chosen:
            continue
        try:
            drawn = (plot_confusion(rows, chosen, card.get("classes"), Path(run_dir) / name, title, log)
                     if name == "confusion.png" else plot_pred_vs_true(rows, chosen, Path(run_dir) / name, title))
        except Exception as exc:
            log(f"warning: could not draw {name}: {type(exc).__name__}: {' '.join(str(exc).split())}")
            continue
        if drawn:
            written.append(Path(run_dir) / name)
    return written


def _grid(n: int, width: float, height: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = min(n, 4)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows + 0.6), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return plt, fig, list(axes.flat[:n])


def plot_confusion(rows: list[dict], chosen: list[Panel], classes, path: Path, title: str, log) -> bool:
    """One matrix per class prediction: counts in the cells, shaded by the share of the true class (its row), so
    a rare class's mistakes show as plainly as a common one's."""
    from recipe_zoo.plots import save_png

    tables = []
    for panel in chosen[:MAX_PANELS]:
        truth, pred = pairs(rows, panel)
        order = class_order(truth, pred, classes if panel.kind == "classes" else None)
        if not truth or len(order) > MAX_CLASSES:
            if truth:
                log(f"note: no confusion matrix of {panel.pred}: {len(order)} classes (over {MAX_CLASSES})")
            continue
        tables.append((panel, order, confusion_matrix(truth, pred, order)))
    if not tables:
        return False
    k = max(len(order) for _, order, _ in tables)
    side = 3.2 if len(tables) > 1 and k <= 3 else min(11.0, 2.2 + 0.5 * k)
    plt, fig, axes = _grid(len(tables), side + 1.0, side)
    for ax, (panel, order, matrix) in zip(axes, tables):
        share = matrix / np.maximum(matrix.sum(1, keepdims=True), 1)
        ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
        font = 9 if k <= 12 else 7 if k <= 20 else 5
        for (i, j), count in np.ndenumerate(matrix):
            if count:
                ax.text(j, i, str(count), ha="center", va="center", fontsize=font,
                        color="white" if share[i, j] > 0.55 else "black")
        ticks = range(len(order))
        labels = [c if len(c) <= 12 else c[:11] + "…" for c in order]
        ax.set_xticks(ticks, labels, rotation=90 if k > 6 or max(map(len, labels)) > 4 else 0, fontsize=font + 1)
        ax.set_yticks(ticks, labels, fontsize=font + 1)
        ax.set(xlabel="predicted" + (" (P > 0.5)" if panel.kind == "binary" else ""), ylabel="true")
        accuracy = np.trace(matrix) / matrix.sum()
        ax.set_title(f"{panel.name + ': ' if panel.name else ''}accuracy {accuracy:.3f}, n={matrix.sum()}",
                     fontsize=10)
    fig.suptitle(f"{title} · test predictions" if title else "test predictions", fontsize=11)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    return True


def plot_pred_vs_true(rows: list[dict], chosen: list[Panel], path: Path, title: str) -> bool:
    """A scatter per numeric target with the y = x line and the RMSE in its title; a zero-shot score (not in the
    target's units) without the line, with the Spearman correlation."""
    from scipy.stats import spearmanr

    from recipe_zoo.plots import save_png

    data = [(panel, *map(np.asarray, pairs(rows, panel))) for panel in chosen[:MAX_PANELS]]
    data = [(panel, t, p) for panel, t, p in data if len(t)]
    if not data:
        return False
    plt, fig, axes = _grid(len(data), 4.2, 4.0)
    for ax, (panel, truth, pred) in zip(axes, data):
        alpha = 0.7 if len(truth) < 300 else 0.35 if len(truth) < 3000 else 0.15
        ax.scatter(truth, pred, s=10 if len(truth) < 1000 else 4, alpha=alpha, color="C0", linewidths=0)
        name = f"{panel.name}: " if panel.name else ""
        if panel.kind == "ranks":
            rho = spearmanr(truth, pred).statistic if len(truth) > 1 else math.nan
            ax.set(xlabel="measured", ylabel=panel.pred, title=f"{name}Spearman {rho:.3f}, n={len(truth)}")
        else:
            low, high = min(truth.min(), pred.min()), max(truth.max(), pred.max())
            pad = 0.03 * (high - low or 1.0)
            ax.plot([low - pad, high + pad], [low - pad, high + pad], color="0.4", lw=1, ls="--", label="y = x")
            ax.set_xlim(low - pad, high + pad)
            ax.set_ylim(low - pad, high + pad)
            ax.set_aspect("equal")
            rmse = float(np.sqrt(np.mean((pred - truth) ** 2)))
            ax.set(xlabel="true", ylabel="predicted", title=f"{name}RMSE {rmse:.4g}, n={len(truth)}")
            ax.legend(loc="upper left", fontsize=8)
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
    more = f" (first {MAX_PANELS} targets)" if len(chosen) > MAX_PANELS else ""
    fig.suptitle((f"{title} · test predictions" if title else "test predictions") + more, fontsize=11)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    return True
