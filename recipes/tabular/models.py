"""The networks for tables and their input: numbers standardised (or through a normal quantile transform)
with missing flags, categories as embedding indices; an MLP over embeddings or a small FT-Transformer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

# =============================================================================================
# The neural network: numeric standardisation (or quantiles), categorical embeddings, MLP / FT-Transformer
# =============================================================================================

@dataclass
class Encoded:
    num: torch.Tensor  # (n, numeric features + missing indicators) float
    cat: torch.Tensor  # (n, categorical columns) long; 0 = missing or unseen
    cardinalities: list[int]


def encode_for_nn(X, fit_rows: np.ndarray, quantile: bool, seed: int) -> Encoded:
    """Numbers: NaN -> training median plus a missing flag, then z-score (or a normal quantile transform)
    fitted on the training rows. Categories: index + 1 over the training rows' categories, 0 for the rest."""
    return encode(X, fit_encoding(X, fit_rows, quantile, seed))


def fit_encoding(X, fit_rows: np.ndarray, quantile: bool, seed: int) -> dict:
    """What ``encode`` needs, fitted on ``fit_rows``, as JSON-ready lists (the run saves it)."""
    numeric = [c for c in X.columns if str(X[c].dtype) != "category"]
    categorical = [c for c in X.columns if str(X[c].dtype) == "category"]
    state: dict = {"numeric": numeric, "categories": {}}
    if numeric:
        values = X[numeric].to_numpy(np.float64)
        missing = np.isnan(values)
        median = np.nan_to_num(np.nanmedian(values[fit_rows], axis=0))
        values = np.where(missing, median, values)
        state.update(median=median.tolist(), flags=missing[fit_rows].any(axis=0).tolist())
        if quantile:
            from sklearn.preprocessing import QuantileTransformer

            qt = QuantileTransformer(n_quantiles=min(1000, len(fit_rows)), output_distribution="normal",
                                     subsample=10**9, random_state=seed).fit(values[fit_rows])
            state["quantile"] = {"quantiles": qt.quantiles_.tolist(), "references": qt.references_.tolist()}
        else:
            state.update(mean=values[fit_rows].mean(axis=0).tolist(), std=values[fit_rows].std(axis=0).tolist())
    for c in categorical:
        codes = X[c].cat.codes.to_numpy().astype(np.int64)  # -1 = missing
        seen = np.unique(codes[fit_rows][codes[fit_rows] >= 0])
        state["categories"][c] = [str(X[c].cat.categories[i]) for i in seen]  # index i + 1 in the embedding
    return state


def quantile_transformer(state: dict):
    """The fitted normal quantile transform, rebuilt from its saved quantiles (sklearn's own ``transform``)."""
    from sklearn.preprocessing import QuantileTransformer

    qt = QuantileTransformer(n_quantiles=len(state["references"]), output_distribution="normal", subsample=10**9)
    qt.quantiles_, qt.references_ = np.asarray(state["quantiles"]), np.asarray(state["references"])
    qt.n_quantiles_, qt.n_features_in_ = len(qt.references_), qt.quantiles_.shape[1]
    return qt


def encode(X, state: dict) -> Encoded:
    """``X``'s rows as the network takes them (``fit_encoding``); a category outside the training rows' is 0."""
    cols = []
    if state["numeric"]:
        values = X[state["numeric"]].to_numpy(np.float64)
        missing = np.isnan(values)
        values = np.where(missing, np.asarray(state["median"]), values)
        if "quantile" in state:
            values = quantile_transformer(state["quantile"]).transform(values)
        else:
            std = np.asarray(state["std"])
            values = (values - np.asarray(state["mean"])) / np.where(std > 1e-12, std, 1.0)
        cols.append(np.clip(values, -10, 10))
        flagged = np.asarray(state["flags"], dtype=bool)
        if flagged.any():
            cols.append(missing[:, flagged].astype(np.float64))
    num = torch.from_numpy(np.concatenate(cols, axis=1) if cols else np.zeros((len(X), 0))).float()
    cat_cols, cards = [], []
    for c, seen in state["categories"].items():
        index = {name: i + 1 for i, name in enumerate(seen)}
        lookup = np.array([index.get(str(v), 0) for v in X[c].cat.categories] + [0], dtype=np.int64)
        codes = X[c].cat.codes.to_numpy().astype(np.int64)  # -1 = missing
        cat_cols.append(np.where(codes >= 0, lookup[codes], 0))
        cards.append(len(seen) + 1)
    cat = torch.from_numpy(np.stack(cat_cols, axis=1) if cat_cols else np.zeros((len(X), 0), dtype=np.int64))
    return Encoded(num, cat, cards)


def network(spec: dict) -> nn.Module:
    """The network a run describes: {"model", "n_num", "cards", "out", "hidden", "layers", "dropout"}."""
    if spec["model"] == "mlp":
        return TabularMLP(spec["n_num"], spec["cards"], spec["out"], spec["hidden"], spec["layers"], spec["dropout"])
    return FTTransformer(spec["n_num"], spec["cards"], spec["out"], max(8, spec["hidden"] // 4), spec["layers"],
                         spec["dropout"])


def embedding_dim(cardinality: int) -> int:
    return int(min(32, round(1.6 * cardinality ** 0.56)))  # fastai's rule of thumb


class TabularMLP(nn.Module):
    def __init__(self, n_num: int, cards: list[int], out: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, embedding_dim(c)) for c in cards)
        width = n_num + sum(embedding_dim(c) for c in cards)
        blocks = []
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(width, out)

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        parts = [num] + [emb(cat[:, i]) for i, emb in enumerate(self.embeddings)]
        return self.head(self.body(torch.cat(parts, dim=1)))


class FTTransformer(nn.Module):
    """Gorishniy et al. 2021: each feature a token (numbers: x * w_j + b_j; categories: an embedding),
    a CLS token, pre-norm transformer blocks, the CLS state to the output."""

    def __init__(self, n_num: int, cards: list[int], out: int, d: int, blocks: int, dropout: float):
        super().__init__()
        self.num_weight = nn.Parameter(torch.randn(n_num, d) / math.sqrt(d))
        self.num_bias = nn.Parameter(torch.zeros(n_num, d))
        self.embeddings = nn.ModuleList(nn.Embedding(c, d) for c in cards)
        self.cls = nn.Parameter(torch.randn(1, 1, d) / math.sqrt(d))
        layer = nn.TransformerEncoderLayer(d, nhead=8 if d % 8 == 0 else 1, dim_feedforward=int(d * 4 / 3) * 2,
                                           dropout=dropout, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, blocks, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, out)

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        tokens = [num.unsqueeze(-1) * self.num_weight + self.num_bias]
        tokens += [emb(cat[:, i]).unsqueeze(1) for i, emb in enumerate(self.embeddings)]
        x = torch.cat([self.cls.expand(num.size(0), -1, -1)] + tokens, dim=1)  # not len(): export keeps rows dynamic
        return self.head(self.norm(self.encoder(x)[:, 0]))


@torch.no_grad()
def nn_predict(model: nn.Module, enc: Encoded, rows: np.ndarray, device, batch: int = 4096) -> np.ndarray:
    model.eval()
    idx = torch.as_tensor(rows)
    out = [model(enc.num[idx[i:i + batch]].to(device), enc.cat[idx[i:i + batch]].to(device)).float().cpu()
           for i in range(0, len(idx), batch)]
    model.train()
    return torch.cat(out).numpy()
