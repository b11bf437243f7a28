"""Per-item test scores: what a test metric is made of, item by item (each image's hit, each window's nats and
bytes, each row's squared error, each case's Dice), enough to compute the metric again on any resample of the
items. The run keeps them (``test_items.json``), ``zoo bench`` keeps its seeds' (``benchmarks/items.jsonl``), and
the board compares two rows scored on the same items paired: the same resample of items for both
(``recipe_zoo.paired``), which tells apart rows that the items' own noise, taken row by row, would call tied.

A recipe scores its test once through ``test_interval(ItemScores(...))``: the metric's 95% interval over its
items, and, inside ``zoo run``, the scores handed to the run (``collecting``)."""
from __future__ import annotations

import base64
import json
import math
import warnings
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recipe_zoo.core import metrics


def _mean(a: dict, idx: np.ndarray, params: dict) -> float:
    return float(a["x"][idx].mean())


def _rms(a: dict, idx: np.ndarray, params: dict) -> float:
    """Root mean squared error; per target then the mean over targets where ``present`` masks missing ones."""
    squared = a["squared"][idx]
    if "present" not in a:
        return float(np.sqrt(squared.mean()))
    n, total = a["present"][idx].sum(axis=0), squared.sum(axis=0)
    return float(np.mean(np.sqrt(total[n > 0] / n[n > 0]))) if (n > 0).any() else float("nan")


def _bpb(a: dict, idx: np.ndarray, params: dict) -> float:
    return float(a["nats"][idx].sum() / (math.log(2) * a["bytes"][idx].sum()))


def _dice(a: dict, idx: np.ndarray, params: dict) -> float:
    """The mean over foreground classes of each class's mean Dice over the cases (NaN: the class absent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(np.nanmean(a["dice"][idx], 0)[1:]))


def _spearman(a: dict, idx: np.ndarray, params: dict) -> float:
    """Spearman as ``metrics.spearman`` ranks, with the whole item set's tie tolerances in every resample."""
    y, pred = a["y"], a["pred"]
    return metrics.rank_correlation(metrics.tied_ranks(y[idx], params["tol_y"]),
                                    metrics.tied_ranks(pred[idx], params["tol_pred"]))


def _task(a: dict, idx: np.ndarray, params: dict) -> float:
    """A metric of ``metrics.score_tasks`` (ROC-AUC over targets, ...) on the resampled rows; binary ROC-AUC by
    its rank form (what scikit-learn computes, 50x faster: a board pairs rows over 1,000 resamples)."""
    name, y, pred = params["metric"], a["y"][idx], a["pred"][idx]
    if name == "roc_auc" and params["task"] == "binary":
        return _roc_auc_by_ranks(y, pred)
    return metrics.score_tasks(y, pred, params["task"], (name,)).get(name, float("nan"))


def _roc_auc_by_ranks(y: np.ndarray, pred: np.ndarray) -> float:
    """The mean over target columns of ROC-AUC as the Mann-Whitney U of the scores' average ranks (ties count
    half, as in scikit-learn's trapezoids); rows without a target and one-class columns left out."""
    from scipy.stats import rankdata

    aucs = []
    for t in range(y.shape[1]):
        present = ~np.isnan(y[:, t])
        yt, pt = y[present, t], pred[present, t]
        positives = int(yt.sum())
        if 0 < positives < len(yt):
            ranks = rankdata(pt)
            aucs.append((ranks[yt == 1].sum() - positives * (positives + 1) / 2) / (positives * (len(yt) - positives)))
    return float(np.mean(aucs)) if aucs else float("nan")


STATISTICS: dict[str, Callable[[dict, np.ndarray, dict], float]] = {
    "mean": _mean, "rms": _rms, "bpb": _bpb, "dice": _dice, "spearman": _spearman, "task": _task}


def draw(rng: np.random.Generator, n: int, block: int = 1) -> np.ndarray:
    """A resample of ``n`` items with replacement; with ``block`` > 1, runs of ``block`` neighbours (from random
    starts, wrapping around) so that correlated neighbours (an LLM's adjacent windows) are drawn together."""
    if block <= 1:
        return rng.integers(0, n, n)
    starts = rng.integers(0, n, -(-n // block))
    return ((starts[:, None] + np.arange(block)) % n).reshape(-1)[:n]


def cube_root_block(n: int) -> int:
    """Contiguous items' block length: n^(1/3), the order that suits block bootstraps of a mean (Hall, Horowitz
    and Jing, 1995)."""
    return max(1, round(n ** (1 / 3)))


@dataclass(frozen=True)
class ItemScores:
    """``kind`` (a name in ``STATISTICS``) computed from ``arrays`` (first axis: the items, in the order the
    recipe scores them); ``block``: neighbours resampled together; ``params``: what the kind needs besides."""

    kind: str
    arrays: dict[str, np.ndarray]
    block: int = 1
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in STATISTICS:
            raise ValueError(f"unknown item statistic {self.kind!r}")

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))

    def statistic(self, idx: np.ndarray) -> float:
        return STATISTICS[self.kind](self.arrays, idx, self.params)

    def interval(self, rounds: int = 1000) -> tuple[float, float]:
        """The metric's 95% percentile interval over the items resampled (in blocks where they are neighbours)."""
        return metrics.bootstrap(self.statistic, len(self), rounds=rounds,
                                 draw=lambda rng, n: draw(rng, n, self.block))

    def to_json(self) -> dict:
        return {"kind": self.kind, "block": self.block, "params": self.params,
                "arrays": {k: encode(v) for k, v in self.arrays.items()}}

    @classmethod
    def from_json(cls, data: dict) -> ItemScores:
        return cls(data["kind"], {k: decode(v) for k, v in data["arrays"].items()}, int(data.get("block", 1)),
                   dict(data.get("params", {})))


def encode(array: np.ndarray) -> dict:
    """An array as JSON: dtype, shape and its bytes deflated, in base64."""
    array = np.ascontiguousarray(array)
    return {"dtype": array.dtype.str, "shape": list(array.shape),
            "data": base64.b64encode(zlib.compress(array.tobytes(), 9)).decode("ascii")}


def decode(data: dict) -> np.ndarray:
    raw = zlib.decompress(base64.b64decode(data["data"]))
    return np.frombuffer(raw, dtype=np.dtype(data["dtype"])).reshape(data["shape"]).copy()


def mean_of(x) -> ItemScores:
    """A metric that is the mean of per-item values (hits of an accuracy)."""
    return ItemScores("mean", {"x": np.asarray(x, dtype=np.float64)})


def rms_of(y, pred) -> ItemScores:
    """RMSE; for (n, targets) with NaN targets, per target over the rows that have it, then the mean."""
    y, pred = np.asarray(y, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    if y.ndim == 1:
        return ItemScores("rms", {"squared": (pred.reshape(y.shape) - y) ** 2})
    present = ~np.isnan(y)
    return ItemScores("rms", {"squared": np.where(present, (pred - np.nan_to_num(y)) ** 2, 0.0), "present": present})


def spearman_of(y, pred) -> ItemScores:
    y, pred = np.asarray(y).reshape(-1), np.asarray(pred).reshape(-1)
    return ItemScores("spearman", {"y": y, "pred": pred},
                      params={"tol_y": metrics.tie_tolerance(y), "tol_pred": metrics.tie_tolerance(pred)})


_SINK: list[ItemScores] | None = None


@contextmanager
def collecting() -> Iterator[list[ItemScores]]:
    """Inside ``zoo run``: the item scores of the test, as ``test_interval`` is given them."""
    global _SINK
    _SINK, before = [], _SINK
    try:
        yield _SINK
    finally:
        _SINK = before


def test_interval(scores: ItemScores, rounds: int = 1000) -> tuple[float, float]:
    """The test metric's 95% interval over its items; inside ``collecting``, the scores are kept for the run."""
    if _SINK is not None:
        _SINK.append(scores)
    return scores.interval(rounds)


FILE = "test_items.json"


def save(run_dir: Path, scores: ItemScores) -> None:
    from recipe_zoo.core.checkpoint import write_text

    write_text(run_dir / FILE, json.dumps(scores.to_json()))


def load(run_dir: Path) -> ItemScores | None:
    path = run_dir / FILE
    return ItemScores.from_json(json.loads(path.read_text())) if path.exists() else None
