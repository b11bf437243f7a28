"""A trained run as a model you can use: what a recipe saves for inference, and what its predict hook is handed.

Every recipe writes, into its run directory, the weights that produced its reported metric (safetensors, or an
XGBoost model as JSON), and a ``model.json`` card: what the artefact is (``format_version``), the recipe, the task,
the class names, the preprocessing state inference needs (normalisation, image size, encoders, scalers, tokenizer
file, ...) and the evaluation settings (TTA, sliding window, ensemble). Nothing is a pickle.

A recipe's predict hook (``@recipe(..., predict=fn, predict_options=Cls)``) is called as ``fn(cfg, options, run)``
with the trained run's config, its typed options and a ``PredictRun``; it returns ``Predictions``. ``zoo predict``
writes their rows to a CSV and prints their metrics; ``recipe_zoo.load(RUN_DIR).predict(...)`` returns them.
"""
from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_zoo.core import owned
from recipe_zoo.core.api import NonNegativeInt
from recipe_zoo.core.errors import ZooError

CARD = "model.json"
FORMAT = "recipe-zoo-model"
FORMAT_VERSION = 1  # raise it when a card's fields change meaning; a reader refuses other versions in one line


# =============================================================================================
# The card: model.json
# =============================================================================================

def write_card(run_dir: str | os.PathLike, *, recipe: str, task: str, weights: list[str], selected: str,
               classes: list | None = None, preprocess: dict | None = None, evaluation: dict | None = None,
               **more: Any) -> Path:
    """Write ``model.json``. ``weights``: the files (relative to the run) that hold the model; ``selected``: which
    state they are (``ema``, ``best-val``, ``final``, ``refit``, ``ensemble of 5 folds``, ...); ``task``:
    classification | regression | segmentation | tokens | generation | embedding | zero-shot."""
    path = Path(run_dir) / CARD
    if not _main_process():
        return path
    card = {"format": FORMAT, "format_version": FORMAT_VERSION, "recipe": recipe, "task": task,
            "weights": list(weights), "selected": selected, "classes": list(classes) if classes is not None else None,
            "preprocess": preprocess or {}, "evaluation": evaluation or {}, **more}
    _write_card(path, card)
    return path


def recipe_name(run, default: str) -> str:
    """The card's recipe: the name the run was trained under (a `zoo new` copy has its own), else ``default``."""
    return getattr(getattr(run, "spec", None), "name", None) or default


def add_to_card(run_dir: str | os.PathLike, **fields: Any) -> None:
    """Fields the application knows of every run (the precision it computed in) added to the card its recipe
    wrote; nothing when the recipe wrote none."""
    path = Path(run_dir) / CARD
    if not _main_process() or not path.exists():
        return
    _write_card(path, {**json.loads(path.read_text()), **fields})


def _write_card(path: Path, card: dict) -> None:
    from recipe_zoo.core.checkpoint import write_text

    write_text(path, json.dumps(card, indent=1, default=_plain) + "\n")


def _main_process() -> bool:
    from recipe_zoo.core.distributed import is_main

    return is_main()


def write_predictions(run_dir: str | os.PathLike, rows: list[dict]) -> Path:
    """The run's own evaluation-split predictions, ``predictions.csv`` (the main process writes it): what
    ``zoo predict RUN_DIR`` with no data reproduces."""
    path = Path(run_dir) / "predictions.csv"
    return write_rows(path, rows) if _main_process() else path


def _plain(value):
    if hasattr(value, "tolist"):  # numpy / torch scalars and arrays
        return value.tolist()
    raise TypeError(f"model.json: {type(value).__name__} is not JSON")


def read_card(run_dir: str | os.PathLike) -> dict:
    """A run's ``model.json``, checked: one-line errors for a missing card, another format or another version."""
    run_dir = Path(run_dir)
    path = run_dir / CARD
    if not run_dir.is_dir():
        raise ZooError(f"{run_dir}: no such run directory")
    if not path.is_file():
        summary = run_dir / "summary.json"
        status = json.loads(summary.read_text()).get("status") if summary.is_file() else None
        why = ("the run did not finish" if status is None else
               f"the run ended {status} (zoo run --resume {run_dir} continues it)" if status != "ok" else
               "it was trained by a zoo before model cards (retrain it), or its recipe saves no model")
        raise ZooError(f"{path}: not found: {why}")
    try:
        card = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZooError(f"{path}: not a model card ({exc})") from None
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        kind = card.get("format") if isinstance(card, dict) else type(card).__name__
        raise ZooError(f"{path}: not a recipe zoo model card (format {kind!r})")
    if card.get("format_version") != FORMAT_VERSION:
        raise ZooError(f"{path}: format_version {card.get('format_version')!r}, and this zoo reads format_version "
                       f"{FORMAT_VERSION}; use the zoo version that trained it, or retrain")
    for name in [*card.get("weights", []), *card.get("files", [])]:
        if not owned.inside(run_dir, name, str(path)).exists():  # a card's names stay inside its run
            raise ZooError(f"{run_dir / name}: not found (model.json lists it)")
    return card


# =============================================================================================
# Weights and tables
# =============================================================================================

def save_tensors(tensors: dict, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """A dict of tensors as safetensors (contiguous, detached, on the CPU)."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)


def load_tensors(path: str | os.PathLike) -> dict:
    from recipe_zoo.core.checkpoint import read_weights

    return read_weights(path)


def fit_state(module, state: dict, path: str | os.PathLike, strict: bool = True):
    """``module.load_state_dict(state)``, where ``state`` was read from ``path``: weights of another shape or with
    other names (a damaged or swapped file) are one line naming the file, not a traceback."""
    try:
        return module.load_state_dict(state, strict=strict)
    except RuntimeError as exc:
        detail = " ".join(line.strip() for line in str(exc).splitlines()[1:3])
        raise ZooError(f"{path}: does not fit the model the run's model.json describes ({detail[:200]})") from None


def load_into(module, path: str | os.PathLike):
    """A saved state dict (safetensors) into ``module``, one line when it does not fit."""
    return fit_state(module, load_tensors(path), path)


def write_rows(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Rows as CSV (or TSV by suffix): columns in first-seen order; floats written exactly (``repr``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from recipe_zoo.core.checkpoint import replaced

    columns = list(dict.fromkeys(k for row in rows for k in row))
    with replaced(path) as tmp, open(tmp, "w", newline="") as f:  # whole or not at all
        writer = csv.writer(f, delimiter="\t" if path.suffix == ".tsv" else ",")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in columns])
    return path


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if hasattr(value, "item"):
        value = value.item()
    return repr(value) if isinstance(value, float) else str(value)


# =============================================================================================
# What a predict hook is handed and returns
# =============================================================================================

@dataclass
class PredictOptions:
    """The options every predict hook takes; a recipe's own options subclass this (``zoo predict RUN key=value``)."""

    data: str = ""  # what to predict: a file or folder; '' = the run's own test split, scored again
    batch_size: NonNegativeInt = 0  # items per batch; 0 = the recipe's evaluation batch for the device


@dataclass
class Predictions:
    """What a predict hook returns. ``rows``: one per item, written as the CSV; ``metrics``: when the data carries
    labels (the run's own split), computed as the run computed them; ``files``: written beside the CSV (masks,
    images, embeddings); ``arrays``: for the Python API (probabilities, embeddings, masks)."""

    rows: list[dict] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    arrays: dict[str, Any] = field(default_factory=dict)
    dropped: int = 0  # items that could not be predicted (an invalid SMILES): kept as blank rows, counted here
    text: str = ""  # what zoo predict prints before its summary (generated text)


@dataclass
class PredictRun:
    """A trained run, opened for prediction. Has what a recipe's data loaders use of a ``Run`` (``log``, ``seed``,
    ``device``, no-op ``record_split``/``report``/``inspect``), plus the card and where outputs go (``files_dir``:
    beside the CSV, made on first use)."""

    dir: Path
    card: dict
    out: Path  # the CSV
    device: str = "auto"
    seed: int = 0
    log: Callable[[str], None] = lambda message: print(message, file=sys.stderr, flush=True)
    spec: Any = None
    inspecting = False
    _progress_times: list = field(default_factory=list)  # (first call, last line) of progress()

    @property
    def files_dir(self) -> Path:
        """The folder of the prediction's files (masks, samples): new, empty or the zoo's (``owned.check_folder``;
        inside the run folder, the run's), marked as the zoo's once made outside it."""
        from recipe_zoo.core import owned

        folder = self.out.with_suffix("")
        in_run = folder.resolve().is_relative_to(self.dir.resolve())
        owned.check_folder(folder, "--out's files", owned=in_run)
        folder.mkdir(parents=True, exist_ok=True)
        if not in_run and not (folder / owned.MARKER).is_file():
            owned.mark_folder(folder, run=str(self.dir), by="zoo predict")
        return folder

    def path(self, name: str) -> Path:
        """A file the run saved (``model.safetensors``, ``plan.json``): one line when it is missing."""
        path = owned.inside(self.dir, name, f"{self.dir / CARD}")
        if not path.exists():
            raise ZooError(f"{path}: not found (the run's model needs it)")
        return path

    def progress(self, done: int, total: int, what: str) -> None:
        """A progress line every 2 s, and at the end of work that took longer: nothing for quick work."""
        now = time.monotonic()
        if not self._progress_times:
            self._progress_times[:] = [now, now]
        started, last = self._progress_times
        if now - last >= 2.0 or (done >= total and now - started >= 2.0):
            self.log(f"{what}: {done}/{total}")
            self._progress_times[1] = now

    def record_split(self, parts) -> None:
        pass

    def report(self, key: str, value) -> None:
        pass

    def inspect(self, **parts) -> None:
        pass

    def record_eval(self, row: dict) -> None:
        pass

    def set_metric(self, name: str, higher_is_better: bool) -> None:
        pass


def batched(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
