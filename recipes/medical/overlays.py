"""``cases.png``: the three worst and three best test cases by Dice (over every fold), each image with its
predicted mask shaded and the true mask outlined, a volume at its slice with the most foreground. Drawn from the
masks the run wrote (``predictions/``, as ``zoo predict`` reads them) after it saved them; ``ZOO_PLOTS=0`` skips
it, and a picture that cannot be drawn is a warning in the log, never a failed run.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from recipe_zoo.core import distributed
from recipe_zoo.recipes.medical.data import SegData

SHOWN = 3  # worst and best each
COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45", "#fabed4"]


def draw_cases(run, data: SegData, rows: list[dict]) -> Path | None:
    """cases.png in the run folder from its predictions.csv rows (``file``, ``mask``, ``dice``, ``fold``); the
    main process only. None when nothing was drawn."""
    if os.environ.get("ZOO_PLOTS") == "0" or not distributed.is_main():
        return None
    try:
        return plot_cases(run.dir, data, rows)
    except Exception as exc:  # a picture must never turn a finished run into a crash
        run.log(f"warning: could not draw cases.png: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return None


def chosen(rows: list[dict]) -> list[tuple[str, dict]]:
    """("worst" | "best", row) of the cases shown: the lowest Dice first, then the highest, none twice; cases with
    no Dice (no foreground in the truth) are left out."""
    scored = sorted((r for r in rows if r.get("dice") is not None), key=lambda r: r["dice"])
    worst = scored[:SHOWN]
    best = [r for r in scored[::-1][:SHOWN] if all(r is not w for w in worst)]
    return [("worst", r) for r in worst] + [("best", r) for r in best]


def read_mask(path: Path, values: list[int]) -> np.ndarray:
    """A written mask (label values) as class indices, in the case's axes (masks.save_mask wrote PNGs transposed)."""
    if path.name.endswith(".png"):
        from PIL import Image

        written = np.asarray(Image.open(path)).T
    else:
        import nibabel as nib

        written = np.asarray(nib.load(str(path)).dataobj)
    out = np.zeros(written.shape, dtype=np.int64)
    for k, v in enumerate(values):
        out[written == v] = k
    return out


def view(image: np.ndarray, truth: np.ndarray, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The 2-D picture of a case: (image, truth, prediction, where), rows down the screen; a volume's slice along
    its last axis with the most true foreground (the predicted's when the truth has none)."""
    if image.ndim == 3:
        counts = np.count_nonzero(truth, axis=(0, 1))
        if not counts.any():
            counts = np.count_nonzero(pred, axis=(0, 1))
        z = int(np.argmax(counts))
        image, truth, pred, where = image[..., z], truth[..., z], pred[..., z], f", slice {z}/{truth.shape[-1]}"
    else:
        where = ""
    return image.T, truth.T, pred.T, where


def plot_cases(run_dir: Path, data: SegData, rows: list[dict]) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from recipe_zoo.core.checkpoint import replaced

    picked = chosen(rows)
    if not picked:
        return None
    cases = {c.key or c.name: c for c in data.cases}
    values = data.values or list(range(len(data.classes)))
    fg = range(1, len(data.classes))
    colours = [COLOURS[(k - 1) % len(COLOURS)] for k in fg]
    ncols = min(len(picked), SHOWN)
    nrows = math.ceil(len(picked) / ncols)
    height = 4.05 * nrows + 0.5 * (nrows - 1) + 1.35  # square images 4.05 in wide, their titles, the legend
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, height), squeeze=False)
    # fixed margins (the titles' two lines above each image, the legend below): tight_layout let a row's titles
    # run into the images above them
    fig.subplots_adjust(left=0.01, right=0.99, top=1 - 0.85 / height, bottom=0.5 / height, hspace=0.13, wspace=0.04)
    for ax in axes.flat:
        ax.set_axis_off()
    for ax, (which, row) in zip(axes.flat, picked):
        case = cases[row["file"]]
        pred = read_mask(Path(run_dir) / "predictions" / row["mask"], values)
        image, truth, pred, where = view(case.image[0], case.label[0], pred)
        low, high = np.percentile(image, [1, 99])
        ax.imshow(image, cmap="gray", vmin=low, vmax=high if high > low else low + 1, interpolation="nearest")
        shade = ListedColormap(["none", *colours])
        ax.imshow(np.ma.masked_equal(pred, 0), cmap=shade, vmin=0, vmax=len(data.classes) - 1, alpha=0.45,
                  interpolation="nearest")
        for k, colour in zip(fg, colours):
            if (truth == k).any():
                ax.contour(truth == k, levels=[0.5], colors=[colour], linewidths=1.3)
        fold = f" · fold {row['fold']}" if row.get("fold") not in (None, "") else ""
        ax.set_title(f"{which}: {row['file']}{fold}\nDice {row['dice']:.3f}{where}", fontsize=9)
    handles = [Patch(facecolor=c, alpha=0.45, label=f"predicted {data.classes[k]}") for k, c in zip(fg, colours)]
    handles += [Line2D([], [], color=c, lw=1.3, label=f"true {data.classes[k]} (outline)")
                for k, c in zip(fg, colours)]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=9, frameon=False)
    fig.suptitle(f"{data.name}: the {min(SHOWN, len(picked))} worst and best of {len(rows)} test cases by Dice",
                 fontsize=11)
    path = Path(run_dir) / "cases.png"
    with replaced(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
