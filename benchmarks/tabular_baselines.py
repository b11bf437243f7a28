"""A user's first try, for the tabular closing note: library defaults on exactly our test splits.

    ZOO_DATA=../shared/data python benchmarks/tabular_baselines.py

- ``california-housing``: ``XGBRegressor()`` with ``ocean_proximity`` one-hot, fitted on the 80% of
  ``train_test_split(test_size=0.2, random_state=42)`` (``tabular.split.test_split``: the rows ``tabular/xgb``
  trains and validates on; a default model selects nothing, so it fits on all of them) and scored on its 20%
  (the same test rows as the recipes, for every seed).
- ``adult``: ``XGBClassifier()`` on one-hot categoricals, train file -> test file.

Prints each metric and the fit time.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recipe_zoo.core.metrics import score  # noqa: E402
from recipe_zoo.recipes.tabular import data as tab  # noqa: E402
from recipe_zoo.recipes.tabular import split  # noqa: E402
from recipe_zoo.recipes.tabular.config import TabularConfig  # noqa: E402


class _Run:
    """What ``tabular.data.load_table`` needs of a run."""

    def report(self, *args):
        pass


def first_try(name: str) -> None:
    import pandas as pd
    import xgboost as xgb

    cfg = TabularConfig(data=name, features="none")
    table = tab.load_table(cfg, _Run())
    train, test = split.test_split(table, cfg)
    X = pd.get_dummies(table.X, dtype=np.float32)
    X.columns = [str(c).replace("<", "lt").replace("[", "(").replace("]", ")") for c in X.columns]  # XGBoost's rule
    model = xgb.XGBRegressor() if table.task == "regression" else xgb.XGBClassifier()
    start = time.perf_counter()
    model.fit(X.iloc[train], table.y[train])
    seconds = time.perf_counter() - start
    pred = model.predict(X.iloc[test]) if table.task == "regression" else model.predict_proba(X.iloc[test])[:, 1]
    metrics = score(table.y[test], pred, table.task, tab.METRIC_NAMES[table.task])
    print(f"{name}: {type(model).__name__}() defaults, one-hot categoricals: "
          + ", ".join(f"test {k} {v:.4f}" for k, v in metrics.items()) + f"; fit {seconds:.2f}s")


if __name__ == "__main__":
    for dataset in ("california-housing", "adult"):
        first_try(dataset)
