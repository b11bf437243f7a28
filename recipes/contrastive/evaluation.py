"""Contrastive evaluation on frozen features: the backbone's embeddings of images, a weighted kNN of queries
against a labelled bank (the usual SSL monitor) and a logistic-regression probe, as a run scores them and as
``zoo predict`` scores them again. ``cfg`` is the recipe's config (``ContrastiveConfig`` in ``simclr.py``)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import items, metrics
from recipe_zoo.recipes.image_splits import ImageSplits
from recipe_zoo.recipes.contrastive.data import item_name

# =============================================================================================
# Evaluation on frozen features
# =============================================================================================

@torch.no_grad()
def extract_features(backbone: nn.Module, x_uint8: torch.Tensor, normalize, batch: int = 512,
                     progress=None) -> torch.Tensor:
    was_training = backbone.training
    backbone.eval()
    feats = []
    for i in range(0, len(x_uint8), batch):
        feats.append(backbone(normalize(x_uint8[i:i + batch])).float().cpu())
        if progress is not None:
            progress(min(i + batch, len(x_uint8)), len(x_uint8), "images embedded")
    backbone.train(was_training)
    return torch.cat(feats)


def knn_scores(bank: torch.Tensor, bank_y: torch.Tensor, queries: torch.Tensor, k: int, temperature: float,
               num_classes: int, chunk: int = 1024) -> torch.Tensor:
    """Class scores from the k most cosine-similar bank features, each voting exp(similarity / T)
    (the weighted kNN of Wu et al. 2018, the usual SSL monitor). In fp32 under any autocast: a bf16 run's
    similarities in bf16 would tie neighbours that fp32 tells apart, and its votes would differ from the rows
    scored outside autocast (predictions.csv)."""
    with torch.autocast(queries.device.type, enabled=False):
        bank = F.normalize(bank.float(), dim=1)
        queries = F.normalize(queries.float(), dim=1)
        k = min(k, len(bank))
        out = []
        for i in range(0, len(queries), chunk):
            sim, idx = (queries[i:i + chunk] @ bank.T).topk(k, dim=1)
            votes = torch.zeros(len(sim), num_classes, dtype=sim.dtype)
            out.append(votes.scatter_add_(1, bank_y[idx], (sim / temperature).exp()))
    return torch.cat(out)


def linear_probe(train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """Multinomial logistic regression on standardised frozen features; returns test class probabilities."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    probe = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000))
    probe.fit(train_f.numpy(), train_y.numpy())
    proba = torch.from_numpy(probe.predict_proba(test_f.numpy()))
    full = torch.zeros(len(test_f), int(train_y.max()) + 1, dtype=proba.dtype)  # classes absent from train score 0
    full[:, torch.from_numpy(probe.classes_)] = proba
    return full


def score_features(bank: torch.Tensor, queries: torch.Tensor, splits: ImageSplits, cfg,
                   part: str) -> dict[str, float]:
    """kNN of the ``part`` queries ("val" while training: kNN only; "test" once at the end: kNN with its 95%
    bootstrap interval, and the linear probe) against the bank, the training images (validation excluded)."""
    num_classes, y = len(splits.classes), getattr(splits, f"{part}_y")
    scores = knn_scores(bank, splits.train_y, queries, cfg.knn_k, cfg.knn_temperature, num_classes)
    out = {f"{part}_knn_accuracy": metrics.accuracy(scores, y),
           f"{part}_knn_macro_f1": metrics.macro_f1(scores, y, num_classes)}
    if part == "test":
        low, high = items.test_interval(items.mean_of((scores.argmax(1) == y).numpy()))
        proba = linear_probe(bank, splits.train_y, queries, cfg.probe_c)
        out |= {"test_knn_accuracy_ci_low": low, "test_knn_accuracy_ci_high": high,
                "test_linear_accuracy": metrics.accuracy(proba, y),
                "test_linear_macro_f1": metrics.macro_f1(proba, y, num_classes)}
    return out


def knn_rows(bank: torch.Tensor, queries: torch.Tensor, splits: ImageSplits, cfg) -> list:
    """A row per test query, in embedding order: its item, row, label and kNN prediction (predictions.csv)."""
    scores = knn_scores(bank, splits.train_y, queries, cfg.knn_k, cfg.knn_temperature, len(splits.classes))
    return [{"file": item_name(key), "row": i, "label": splits.classes[int(y)],
             "knn_prediction": splits.classes[int(p)]}
            for i, (key, y, p) in enumerate(zip(splits.keys["test"], splits.test_y, scores.argmax(1)))]


def evaluate_features(backbone: nn.Module, splits: ImageSplits, normalize, cfg,
                      part: str = "test") -> dict[str, float]:
    """Frozen features scored as a run scores them: the training images as the bank, ``part``'s as queries."""
    bank = extract_features(backbone, splits.train_x, normalize)
    return score_features(bank, extract_features(backbone, getattr(splits, f"{part}_x"), normalize), splits, cfg, part)

