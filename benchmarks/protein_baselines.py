"""scikit-learn baselines the protein issue quotes, on exactly the splits our recipes use.

    ZOO_DATA=../shared/data python benchmarks/protein_baselines.py --seeds 0 1 2

- ``tem1-esm2-8m``: standardised ``RidgeCV`` and a default ``MLPRegressor(256)`` on the precomputed
  ESM-2 8M embeddings, fitted on the train part of ``protein/esm-embed``'s split (80/10/10, chosen by a hash of
  each embedding: the same for every seed; RidgeCV selects its alpha by leave-one-out on train, the recipes on
  validation) and scored on its test 10%; the seeds vary the MLP's initialisation only.
- ``p62593``: one-hot + ``RidgeCV`` (its efficient leave-one-out over the alphas), scored on the fair-esm
  example's test 20% (``random_state=42``), the recipes' test too; fitted on the recipes' train part (the example's
  80% less the validation rows) and, as the fair-esm example does, on the whole 80%.

Prints one line per seed and the mean ± std of the test Spearman.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from recipe_zoo.core.metrics import spearman  # the recipes' own: near-equal predictions tie as they do there
from recipe_zoo.core.datasets import locate
from recipe_zoo.recipes.protein import split as psplit
from recipe_zoo.recipes.protein.config import ProteinConfig
from recipe_zoo.recipes.protein.encodings import encode
from recipe_zoo.recipes.protein.loading import load_fasta, load_npz  # (importing it declares protein's datasets)


def tem1(seeds: list[int]) -> None:
    from sklearn.linear_model import RidgeCV
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = load_npz(ProteinConfig(), locate("tem1-esm2-8m"), "fitness")
    X, y = data.emb.astype(np.float64), data.y
    train, _, test = psplit.hash_split(psplit.item_keys(data), psplit.parse_sizes(ProteinConfig.split_sizes))
    results: dict[str, list[float]] = {"RidgeCV": [], "MLPRegressor(256)": []}
    for seed in seeds:
        fit = train
        for name, model in (("RidgeCV", RidgeCV(alphas=np.logspace(-3, 4, 30))),
                            ("MLPRegressor(256)", MLPRegressor(hidden_layer_sizes=(256,), random_state=seed,
                                                               max_iter=500))):
            start = time.perf_counter()
            pipe = make_pipeline(StandardScaler(), model).fit(X[fit], y[fit])
            rho = spearman(y[test], pipe.predict(X[test]))
            results[name].append(rho)
            print(f"tem1-esm2-8m seed {seed} {name}: test Spearman {rho:.4f} ({time.perf_counter() - start:.1f}s)")
    for name, values in results.items():
        print(f"tem1-esm2-8m {name}: {np.mean(values):.4f} ± {np.std(values, ddof=1) if len(values) > 1 else 0:.4f}")


def p62593() -> None:
    from sklearn.linear_model import RidgeCV

    data = load_fasta(ProteinConfig(), locate("p62593"))
    X = encode(data.seqs, "onehot")
    train, val, test = psplit.esm_example_split(psplit.item_keys(data))
    for what, fit in (("the recipes' train", train), ("the example's whole 80%", np.concatenate([train, val]))):
        start = time.perf_counter()
        model = RidgeCV(alphas=np.logspace(-3, 4, 30)).fit(X[fit], data.y[fit])
        rho = spearman(data.y[test], model.predict(X[test]))
        print(f"p62593 one-hot + RidgeCV on {what} (alpha {model.alpha_:.3g}): test Spearman {rho:.4f} "
              f"({time.perf_counter() - start:.1f}s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    tem1(args.seeds)
    p62593()


if __name__ == "__main__":
    main()
