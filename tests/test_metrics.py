import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score

from shared import metrics


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
    from shared.metrics import summarize_folds

    logs = []
    out = summarize_folds([{"test_rmse": 1.0}, {"test_rmse": 3.0}], logs.append)
    assert out == {"test_rmse": 2.0, "test_rmse_std": pytest.approx(2 ** 0.5)} and "per fold" in logs[0]
    assert summarize_folds([{"test_rmse": 1.0}], logs.append) == {"test_rmse": 1.0} and len(logs) == 1
