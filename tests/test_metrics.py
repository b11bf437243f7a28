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
