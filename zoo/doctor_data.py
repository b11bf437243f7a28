"""``zoo doctor``'s data checks, on what a recipe shows with ``run.inspect``: non-finite rows, class balance,
the target's spread, exact duplicates across the splits (token windows for text), per-feature statistics."""
from __future__ import annotations


import numpy as np

from recipe_zoo.doctor_report import TASKS, Done, Report, fmt


class DataChecks(Report):
    def check_data(self, *, train, val, task, num_classes, fine_tune, loop) -> None:
        from recipe_zoo.core import diagnose

        if task not in TASKS:
            raise ValueError(f"run.inspect(task={task!r}): choose one of {TASKS}")
        self.data_seen, self.fine_tune, self.task = True, fine_tune, task
        lines = ["## Data", ""]
        splits = {"train": train, **({"validation": val} if val is not None else {})}
        for name, part in splits.items():
            x = part[0]
            lines.append(f"- {name}: {len(x)} {'tokens' if task == 'tokens' else 'rows'}"
                         + (f", inputs of shape {tuple(np.shape(x))}" if hasattr(x, "shape") else ""))
            for role, arr in (("inputs", x), ("targets", part[1] if len(part) > 1 else None)):
                if arr is None:
                    continue
                bad = diagnose.nonfinite_rows(arr)
                if len(bad):
                    self.add("error", "data/nonfinite", f"{len(bad)} of {len(arr)} {name} {role} rows hold NaN or "
                             f"inf (rows {', '.join(map(str, bad[:5]))}{', ...' if len(bad) > 5 else ''})",
                             "drop or impute them: one such row turns the loss NaN")
        if task in ("classification", "segmentation") and len(train) > 1:
            self._balance(np.asarray(diagnose.as_numpy(train[1])), num_classes, task, lines)
        if task == "regression" and len(train) > 1:
            self._target(np.asarray(diagnose.as_numpy(train[1]), dtype=float), lines)
        if val is not None:
            self._leakage(train[0], val[0], task, lines)
        if task != "tokens":
            self._inputs(train[0], lines)
        self.sections.append("\n".join(lines))
        if not loop:
            self.add("info", "training", f"{self.spec.name} trains without the core loop (trees, ridge or inference): "
                     "overfit, LR range and health checks do not apply")
            raise Done

    def _balance(self, y: np.ndarray, num_classes, task: str, lines: list[str]) -> None:
        if y.size == 0:
            return
        if not np.issubdtype(y.dtype, np.integer) and not np.all(np.mod(y, 1) == 0):
            self.add("error", "data/labels", "class labels are not whole numbers",
                     "classification needs integer labels 0..C-1 (regression targets want task=regression)")
            return
        y = y.astype(np.int64).ravel()
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or (num_classes is not None and hi >= num_classes):
            self.add("error", "data/labels", f"labels span {lo}..{hi} but the model has {num_classes} outputs",
                     "remap labels to 0..C-1 or give the model as many outputs as classes")
            return
        counts = np.bincount(y, minlength=num_classes or hi + 1)
        share = counts / counts.sum()
        what = "pixels" if task == "segmentation" else "rows"
        lines.append(f"- classes: {len(counts)}; {what} per class " + ", ".join(f"{i}: {c}" for i, c in enumerate(counts[:20]))
                     + (" ..." if len(counts) > 20 else ""))
        empty = np.flatnonzero(counts == 0)
        if task == "classification" and len(empty):
            self.add("warn", "data/balance", f"{len(empty)} class(es) have no training rows "
                     f"({', '.join(map(str, empty[:5]))})", "check the label mapping, or drop the classes from the head")
        present = counts[counts > 0]
        ratio = present.max() / present.min()
        fix = ("a weighted loss (class weights ~ 1/frequency), focal loss or a weighted sampler; "
               "report macro-F1 rather than accuracy")
        if task == "segmentation":
            if share[1:].sum() < 0.01:
                self.add("warn", "data/balance", f"foreground is {100 * share[1:].sum():.2f}% of the pixels",
                         "Dice (or DiceCE) loss, foreground-weighted patch sampling")
            else:
                self.add("ok", "data/balance", f"foreground is {100 * share[1:].sum():.1f}% of the pixels")
        elif ratio >= 10:
            self.add("warn", "data/balance", f"imbalanced: the largest class has {ratio:.1f}x the rows of the smallest",
                     fix)
        elif ratio >= 3:
            self.add("info", "data/balance", f"mildly imbalanced: largest/smallest class {ratio:.1f}x", fix)
        else:
            self.add("ok", "data/balance", f"{len(present)} classes, largest/smallest {ratio:.2f}x")

    def _target(self, y: np.ndarray, lines: list[str]) -> None:
        y = y[np.isfinite(y)]
        if y.size == 0:
            return
        lines.append(f"- target: mean {fmt(y.mean())}, std {fmt(y.std())}, min {fmt(y.min())}, "
                     f"max {fmt(y.max())}")
        med = float(np.median(y))
        if y.min() > 0 and med > 0 and y.max() / med > 50:
            self.add("info", "data/target", f"skewed positive target (max {y.max() / med:.0f}x the median)",
                     "fit the log of the target and report RMSE on the original scale")
        else:
            self.add("ok", "data/target", f"target std {fmt(y.std())}, range {fmt(y.min())}..{fmt(y.max())}")

    def _leakage(self, train_x, val_x, task: str, lines: list[str]) -> None:
        from recipe_zoo.core import diagnose

        if task == "tokens":
            found, total = _shared_windows(np.asarray(diagnose.as_numpy(train_x)), np.asarray(diagnose.as_numpy(val_x)))
            what = f"{found} of {total} validation windows of {WINDOW} tokens also occur verbatim in train"
            lines.append(f"- leakage: {what}")
            if total and found / total > 0.01:
                self.add("warn", "data/leakage", what, "deduplicate across splits (documents, not lines)")
            else:
                self.add("ok", "data/leakage", what)
            return
        train_h, val_h = diagnose.row_hashes(train_x), diagnose.row_hashes(val_x)
        first: dict[str, int] = {}
        for i, h in enumerate(train_h):
            first.setdefault(h, i)
        pairs = [(j, first[h]) for j, h in enumerate(val_h) if h in first]
        within = len(train_h) - len(first)
        lines.append(f"- exact duplicates: {len(pairs)} validation rows also in train; {within} repeated rows within train")
        if pairs:
            shown = ", ".join(f"val {j} = train {i}" for j, i in pairs[:3])
            self.add("error" if len(pairs) / len(val_h) >= 0.01 else "warn", "data/leakage",
                     f"{len(pairs)} of {len(val_h)} validation rows are exact copies of training rows ({shown})",
                     "deduplicate before splitting (by content hash; for molecules by canonical SMILES, for "
                     "patients by patient): the validation score is inflated")
        else:
            self.add("ok", "data/leakage", f"no validation row is an exact copy of a training row ({len(val_h)} checked)")
        if within:
            self.add("info", "data/duplicates", f"{within} training rows repeat an earlier training row",
                     "harmless for training unless they also straddle a split")

    def _inputs(self, x, lines: list[str]) -> None:
        from recipe_zoo.core import diagnose

        stats = diagnose.feature_stats(x)
        if not stats:
            return
        lines += ["", "| feature / channel (over up to 4096 rows) | mean | std | min | max |", "|---|---|---|---|---|"]
        lines += [f"| {s['feature']} | {fmt(s['mean'])} | {fmt(s['std'])} | {fmt(s['min'])} | {fmt(s['max'])} |"
                  for s in stats[:32]]
        constant = [s["feature"] for s in stats if s["std"] == 0]
        if constant and len(constant) < len(stats):
            self.add("info", "data/inputs", f"{len(constant)} constant input feature(s)/channel(s) "
                     f"({', '.join(constant[:5])})", "they carry no information; drop them")

    # ---- training -----------------------------------------------------------------------------------

WINDOW = 64


def _shared_windows(train: np.ndarray, val: np.ndarray) -> tuple[int, int]:
    """Validation windows of WINDOW tokens (stride WINDOW) that occur anywhere in train."""
    from numpy.lib.stride_tricks import sliding_window_view

    train, val = np.ascontiguousarray(train.ravel()), np.ascontiguousarray(val.ravel())
    if len(train) < WINDOW or len(val) < WINDOW:
        return 0, 0
    def keys(a: np.ndarray, step: int) -> np.ndarray:  # noqa: E306
        w = sliding_window_view(a.astype(np.int64), WINDOW)[::step]
        h = np.zeros(len(w), dtype=np.uint64)
        for c in range(WINDOW):  # a polynomial hash per window, vectorised over windows
            h = h * np.uint64(1_000_003) + w[:, c].astype(np.uint64)
        return h
    val_keys = keys(val, WINDOW)
    return int(np.isin(val_keys, keys(train, 1)).sum()), len(val_keys)


