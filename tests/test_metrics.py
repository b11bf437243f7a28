import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score

from recipe_zoo.core import metrics


@pytest.mark.parametrize("seed", range(5))
def test_accuracy_and_macro_f1_match_sklearn(seed):
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, 6, (200,), generator=g)
    preds = torch.where(torch.rand(200, generator=g) < 0.6, targets, torch.randint(0, 7, (200,), generator=g))
    assert metrics.accuracy(preds, targets) == pytest.approx(accuracy_score(targets, preds))
    assert metrics.macro_f1(preds, targets) == pytest.approx(f1_score(targets, preds, average="macro"))


def test_macro_f1_from_logits_with_absent_class():
    targets = torch.tensor([0, 0, 1, 1, 3])
    logits = torch.nn.functional.one_hot(torch.tensor([0, 1, 1, 1, 2]), 5).float()
    expected = f1_score(targets, logits.argmax(1), average="macro")
    assert metrics.macro_f1(logits, targets, num_classes=5) == pytest.approx(expected)
    assert metrics.accuracy(logits, targets) == pytest.approx(0.6)


def test_summarize_folds_means_and_sample_std():
    from recipe_zoo.core.metrics import summarize_folds

    logs = []
    out = summarize_folds([{"test_rmse": 1.0}, {"test_rmse": 3.0}], logs.append)
    assert out == {"test_rmse": 2.0, "test_rmse_std": pytest.approx(2 ** 0.5)} and "per fold" in logs[0]
    assert summarize_folds([{"test_rmse": 1.0}], logs.append) == {"test_rmse": 1.0} and len(logs) == 1


def _scipy_frechet(mu1, s1, mu2, s2):
    """The textbook form with scipy's general matrix square root (real part), as reference."""
    import numpy as np
    from scipy import linalg

    covmean = linalg.sqrtm(s1 @ s2)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean.real))


@pytest.mark.parametrize("n,d", [(500, 16), (40, 64)])  # full-rank, and fewer samples than features
def test_frechet_distance_matches_scipy(n, d):
    import numpy as np

    rng = np.random.default_rng(d)
    a = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
    b = rng.normal(0.3, 1.0, size=(n, d)) @ rng.normal(size=(d, d))
    fa, fb = metrics.gaussian_fit(a), metrics.gaussian_fit(b)
    ours = metrics.frechet_distance(*fa, *fb)
    assert ours == pytest.approx(_scipy_frechet(*fa, *fb), rel=1e-6)
    shift = np.full(d, 0.5)  # same covariance, shifted mean: exactly the squared mean distance
    tol = 1e-6 * np.trace(fa[1])  # round-off on the near-zero eigenvalues of a rank-deficient fit
    assert metrics.frechet_distance(fa[0], fa[1], fa[0] + shift, fa[1]) == pytest.approx(0.25 * d, abs=tol)
    assert metrics.frechet_distance(*fa, *fa) == pytest.approx(0.0, abs=tol)
    with pytest.raises(ValueError, match="mismatched"):
        metrics.frechet_distance(fa[0], fa[1], fb[0][:-1], fb[1])


# ---------------------------------------------------------------------------------------------
# Array metrics (tables, molecules, proteins): against their definitions and scipy/sklearn references
# ---------------------------------------------------------------------------------------------

def test_regression_scores_match_their_definitions():
    import numpy as np
    from scipy import stats

    rng = np.random.default_rng(0)
    y = rng.normal(size=300)
    pred = y + rng.normal(scale=0.5, size=300)
    out = metrics.score(y, pred, "regression", ("rmse", "mae", "r2", "spearman", "pearson"))
    assert out["rmse"] == pytest.approx(np.sqrt(np.mean((y - pred) ** 2)), rel=1e-12)
    assert out["mae"] == pytest.approx(np.mean(np.abs(y - pred)), rel=1e-12)
    assert out["r2"] == pytest.approx(1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2), rel=1e-12)
    ranks = stats.rankdata(y), stats.rankdata(pred)  # Spearman: Pearson's r of the ranks
    assert out["spearman"] == pytest.approx(np.corrcoef(*ranks)[0, 1], rel=1e-12)
    assert out["pearson"] == pytest.approx(np.corrcoef(y, pred)[0, 1], rel=1e-12)
    constant = metrics.score(y, np.ones_like(y), "regression", ("spearman", "pearson"))
    assert constant == {"spearman": 0.0, "pearson": 0.0}  # no ranks to correlate


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_spearman_is_scipys_where_no_values_are_near_ties(seed, dtype):
    """Values no two of which are within the noise tolerance, and exact ties (integers, rounded targets): scipy's
    spearmanr, to round-off. (Random float32 values are not such: 100 of them at scale 30 can hold a pair 64 eps x
    max|x| apart, which ranks as a tie here; so the predictions are a jittered grid, correlated with the targets.)"""
    import numpy as np
    from scipy import stats

    rng = np.random.default_rng(seed)
    y = rng.normal(size=500)
    ranks = np.argsort(np.argsort(y + rng.normal(scale=0.7, size=500)))
    pred = ranks // 3 if dtype == "int64" else ranks * 0.1 + rng.uniform(0, 0.02, 500)  # ints: ties in threes
    pred = pred.astype(dtype)
    if dtype != "int64":  # no neighbours within the tolerance: the check of this test's premise
        assert np.diff(np.sort(pred.astype(np.float64))).min() > 100 * metrics.tie_tolerance(pred)
    assert metrics.spearman(y, pred) == pytest.approx(stats.spearmanr(y, pred)[0], rel=1e-12)
    assert metrics.spearman(y.round(1), pred) == pytest.approx(stats.spearmanr(y.round(1), pred)[0], rel=1e-12)


def _nudged(x, ulps: int, rng):
    """``x`` with some values moved by up to ``ulps`` units in their last place (float noise of another sum order)."""
    import numpy as np

    out = x.copy()
    for i in rng.choice(len(x), len(x) // 3, replace=False):
        toward = x.dtype.type(np.inf if rng.random() < 0.5 else -np.inf)  # in the values' own precision
        for _ in range(int(rng.integers(1, ulps + 1))):
            out[i] = np.nextafter(out[i], toward)
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_spearman_is_the_same_for_predictions_a_few_ulps_apart(dtype):
    """Duplicated items (the same sequence twice) predicted equal up to summation order: a last-bit difference
    flips scipy's ranks, and moves its rho; here the ranks, and so rho and the bootstrap's statistic, are
    identical: the same ranks through the same arithmetic (hence ==)."""
    import numpy as np
    from scipy import stats

    from recipe_zoo.recipes.protein.scoring import item_scores

    rng = np.random.default_rng(0)
    base = rng.normal(size=60)
    pred = np.concatenate([base, base, base[:20]]).astype(dtype)  # 80 duplicated predictions
    y = rng.normal(size=len(pred)) + np.concatenate([base, base, base[:20]])
    nudged = _nudged(pred, 4, rng)
    assert (nudged != pred).sum() > 20
    assert stats.spearmanr(y, nudged)[0] != stats.spearmanr(y, pred)[0]  # the flip this guards against
    assert metrics.spearman(y, nudged) == metrics.spearman(y, pred)
    assert metrics.spearman(y, pred) == pytest.approx(stats.spearmanr(y, pred)[0], rel=1e-12)  # exact ties: scipy's
    idx = rng.integers(0, len(y), len(y))
    assert item_scores(y, nudged, "regression").statistic(idx) == item_scores(y, pred, "regression").statistic(idx)


def test_values_closer_than_the_tolerance_share_a_rank_and_a_dense_run_is_cut():
    import numpy as np
    from scipy import stats

    x = np.array([3.0, 1.0, 2.0, 1.0 + 8 * np.spacing(1.0), 2.0 - np.spacing(2.0), 0.5])
    tol = metrics.tie_tolerance(x)
    assert tol == pytest.approx(64 * np.finfo(np.float64).eps * 3.0)
    assert metrics.tied_ranks(x, tol).tolist() == stats.rankdata([3, 1, 2, 1, 2, 0.5]).tolist()  # as if equal
    assert metrics.tied_ranks(x, 0.0).tolist() == stats.rankdata(x).tolist()  # tol 0: exact ties only
    apart = np.array([1.0, 1.0 + 1e-9, 1.0 + 2e-9])  # 1e-9 apart: far above the tolerance, distinct ranks
    assert metrics.tied_ranks(apart, metrics.tie_tolerance(apart)).tolist() == [1.0, 2.0, 3.0]
    dense = np.array([0.0, 0.6, 1.2, 1.8, 2.4, 5.0])  # neighbours 0.6 apart chain past tol=1 from the first
    assert metrics.tied_ranks(dense, 1.0).tolist() == [1.5, 1.5, 3.5, 3.5, 5.0, 6.0]
    assert metrics.tied_ranks(np.array([np.inf, 1.0, np.inf, -np.inf]), 0.1).tolist() == [3.5, 2.0, 3.5, 1.0]
    assert metrics.tie_tolerance(np.arange(5)) == 0.0
    assert np.isnan(metrics.spearman([1.0, 2.0, 3.0], [1.0, np.nan, 2.0]))  # as scipy's spearmanr
    assert metrics.spearman([1.0, 2.0, 3.0], [1.0, 1.0 + 2 * np.spacing(1.0), 1.0]) == 0.0  # constant up to noise


def test_classification_scores_match_a_hand_count():
    import numpy as np

    y = np.array([0, 0, 1, 1, 1, 0])
    p = np.array([0.1, 0.6, 0.7, 0.4, 0.9, 0.2])  # P(class 1): labels 0 1 1 0 1 0
    out = metrics.score(y, p, "binary", ("accuracy", "macro_f1", "roc_auc", "pr_auc"))
    assert out["accuracy"] == pytest.approx(4 / 6)
    assert out["macro_f1"] == pytest.approx((2 / 3 + 2 / 3) / 2)  # each class: precision 2/3, recall 2/3
    assert out["roc_auc"] == pytest.approx(8 / 9)  # of the 9 (positive, negative) pairs, 8 are ordered right
    assert out["pr_auc"] == pytest.approx((1 + 1 + 3 / 4) / 3)  # precision at each positive, by score
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]])
    multi = metrics.score(np.array([0, 1, 2, 1]), probs, "multiclass", ("accuracy", "roc_auc"))
    assert multi["accuracy"] == pytest.approx(0.75) and 0 < multi["roc_auc"] <= 1
    assert "roc_auc" not in metrics.score(np.zeros(4), p[:4], "binary", ("roc_auc",))  # undefined on one class


def test_multitask_scores_skip_missing_targets_and_one_class_columns():
    import numpy as np

    y = np.array([[1.0, 0.0, 1.0], [2.0, 1.0, 1.0], [np.nan, 0.0, 1.0], [4.0, 1.0, 1.0]])
    pred = np.array([[1.5, 0.2, 0.9], [2.0, 0.8, 0.8], [99.0, 0.4, 0.7], [3.0, 0.6, 0.9]])
    reg = metrics.score_tasks(y[:, :1], pred[:, :1], "regression", ("rmse",))
    assert reg["rmse"] == pytest.approx(np.sqrt((0.25 + 0 + 1) / 3))  # the NaN row is left out
    cls = metrics.score_tasks(y[:, 1:], pred[:, 1:], "binary", ("roc_auc",))
    assert cls == {"roc_auc": 1.0}  # the second column has one class: left out whole


def test_bits_per_byte():
    import math

    assert metrics.bits_per_byte(math.log(2) * 300, 100) == pytest.approx(3.0)
