"""Gaussian-rank regression targets for the heads on fixed features (``target_scale=rank``): each training target
replaced by the normal quantile of its rank, so the heads fit what Spearman reads (the order) on a target whose
skew no longer weighs the squared error (TEM-1's fitness: a quarter of the variants below 0.57, most near 1).
The map is strictly increasing and piecewise linear through the training targets, extended linearly past both
ends, so validation and test targets mapped with it keep their order (Spearman is unchanged by it) and
predictions map back to the targets' units.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm, rankdata


def _through(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """The piecewise-linear map through the increasing knots (xs, ys), extended past each end along the chord over
    its outer tenth of the knots (one close pair at an end would make the last segment's slope wild)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.interp(x, xs, ys)
    if len(xs) > 1:
        k = max(1, len(xs) // 10)
        low, high = x < xs[0], x > xs[-1]
        out[low] = ys[0] + (x[low] - xs[0]) * (ys[k] - ys[0]) / (xs[k] - xs[0])
        out[high] = ys[-1] + (x[high] - xs[-1]) * (ys[-1] - ys[-1 - k]) / (xs[-1] - xs[-1 - k])
    return out


@dataclass
class RankMap:
    """The training targets' distinct values (ascending) and their Gaussian ranks (tied targets: their mean rank)."""
    y: np.ndarray
    z: np.ndarray

    @classmethod
    def fit(cls, y_train: np.ndarray) -> RankMap:
        y_train = np.asarray(y_train, dtype=np.float64)
        values, where = np.unique(y_train, return_inverse=True)
        z = np.empty(len(values))
        z[where] = norm.ppf((rankdata(y_train) - 0.5) / len(y_train))
        return cls(values, z)

    def forward(self, y: np.ndarray) -> np.ndarray:
        return _through(y, self.y, self.z)

    def inverse(self, z: np.ndarray) -> np.ndarray:
        return _through(z, self.z, self.y)


@dataclass
class RankedHead:
    """A head fitted on Gaussian-rank targets, predicting in the targets' units."""
    inner: object  # ClosedForm | MLPFit
    ranks: RankMap

    @property
    def head(self) -> str:
        return self.inner.head

    @property
    def feats(self):
        return self.inner.feats

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.ranks.inverse(self.inner.predict(X))
