"""``tabular/xgb stream=true``'s models: XGBoost reads a split's training and validation rows a chunk at a time
(``stream.featured``) through a ``DataIter`` into ``QuantileDMatrix``es; ``Stream`` is the ``xgb.Fitter`` over them.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

from recipe_zoo.core.budget import xgboost_time_limit
from recipe_zoo.recipes.tabular import data
from recipe_zoo.recipes.tabular.dask_engine import local_copy
from recipe_zoo.recipes.tabular.stream import StreamTable, bank_rows, featured


def matrix(table: StreamTable, plan: dict, rows: np.ndarray, bank: np.ndarray, ref=None):
    """A ``QuantileDMatrix`` of ``rows`` (sorted), fed a chunk at a time (``ref``: the training matrix, whose bins
    it takes)."""
    import xgboost as xgb

    class Chunks(xgb.DataIter):
        def __init__(self):
            self.it = None
            super().__init__(release_data=True)
            self.reset()

        def reset(self):
            if self.it is not None:
                self.it.close()
            self.it = featured(table, plan, rows, bank)

        def next(self, input_data):
            part = next(self.it, None)
            if part is None:
                return False
            input_data(data=part[0])
            return True

    return xgb.QuantileDMatrix(Chunks(), ref=ref, enable_categorical=True, nthread=os.cpu_count())


class Stream:
    """``xgb.Fitter`` for one split of a streamed table: the training and validation matrices built once;
    ``params(depth, lr, seed, rounds)`` as ``xgb.xgb_params``, ``predict_one(model, X, task, log)`` as
    ``xgb.xgb_predict``."""

    def __init__(self, cfg, run, table: StreamTable, view: tuple, params: Callable, predict_one: Callable):
        _, fit, val, test, plan = view
        self.cfg, self.table, self.plan, self.params, self.predict_one = cfg, table, plan, params, predict_one
        self.fit_rows, self.val_rows, self.wanted = np.sort(fit), np.sort(val), np.union1d(val, test)
        start = time.perf_counter()
        self.bank = bank_rows(table, fit)
        self.train = matrix(table, plan, self.fit_rows, self.bank)
        self.valid = matrix(table, plan, self.val_rows, self.bank, ref=self.train)
        seconds = time.perf_counter() - start
        run.log(f"stream: training and validation matrices ({len(fit)} + {len(val)} rows) built in {seconds:.1f} s "
                f"({(len(fit) + len(val)) / seconds:,.0f} rows/s)")
        self.scores: dict = {}

    def fit(self, depth, lr, seed, seconds, rounds, train, y_train, held, y_held):
        """On the training matrix: the ``train`` rows at their weight, the others at zero; early-stopped on the
        validation matrix (``held``: the validation rows) or on the held-out fold's rows of the training matrix."""
        import xgboost as xgb

        at = np.searchsorted(self.fit_rows, train)
        labels, weights = np.zeros(len(self.fit_rows)), np.zeros(len(self.fit_rows))
        labels[at] = y_train
        w = data.sample_weights(self.table, train, self.cfg)
        weights[at] = 1.0 if w is None else w
        if len(held) == len(self.val_rows) and np.array_equal(np.sort(held), self.val_rows):
            self.valid.set_label(np.asarray(y_held)[np.argsort(held)])
            evals, metric = [(self.valid, "validation")], None
        else:
            where = np.searchsorted(self.fit_rows, held)
            labels[where] = y_held
            evals, metric = [(self.train, "fold")], fold_metric(self.table.task, where, labels)
        self.train.set_label(labels)
        self.train.set_weight(weights)
        params = self.params(depth, lr, seed, rounds)
        stop = params.pop("early_stopping_rounds")
        params = native(params, self.table)
        if metric is not None:  # the fold's own metric only (the matrix's would be the training rows')
            params.pop("eval_metric", None)
            params["disable_default_eval_metric"] = True
        booster = xgb.train(params, self.train, rounds, evals=evals, early_stopping_rounds=stop,
                            custom_metric=metric, verbose_eval=False,
                            callbacks=[xgboost_time_limit(seconds)] if seconds is not None else None)
        return local_copy(booster, self.table.task)

    def predict(self, models: list, rows: np.ndarray, log: bool) -> np.ndarray:
        """The models' mean prediction on training or validation rows, from the matrices (the choices' and the
        out-of-fold scores)."""
        if len(rows) == len(self.val_rows) and np.array_equal(np.sort(rows), self.val_rows):
            m, at = self.valid, np.searchsorted(self.val_rows, rows)
        else:
            m, at = self.train, np.searchsorted(self.fit_rows, rows)
        out = []
        for model in models:
            p = model.get_booster().predict(m, iteration_range=(0, model.best_iteration + 1))
            out.append((np.expm1(p) if log else p) if self.table.task == "regression" else p)
        return np.mean(out, axis=0)[at]

    def score(self, models: list, rows: np.ndarray, log: bool) -> np.ndarray:
        """The models' mean prediction on validation or test rows, from the file's rows as ``zoo predict`` reads them
        (one pass for both)."""
        key = (id(models[0]), log)
        if key not in self.scores:
            parts, where = [], []
            for X, positions in featured(self.table, self.plan, self.wanted, self.bank):
                parts.append(np.mean([self.predict_one(m, X, self.table.task, log) for m in models], axis=0))
                where.append(positions)
            self.scores[key] = (np.concatenate(where), np.concatenate(parts))
        where, pred = self.scores[key]
        return pred[np.searchsorted(where, rows)]

    def close(self) -> None:
        self.train = self.valid = None


def native(params: dict, table: StreamTable) -> dict:
    """``xgb.xgb_params`` (the scikit-learn wrapper's names) as ``xgboost.train`` takes them."""
    params = {k: v for k, v in params.items() if k not in ("n_estimators", "enable_categorical")}
    params["seed"] = params.pop("random_state")
    params["nthread"] = os.cpu_count()
    params["objective"] = {"regression": "reg:squarederror", "binary": "binary:logistic"}.get(table.task,
                                                                                               "multi:softprob")
    if table.task == "multiclass":
        params["num_class"] = len(table.classes)
    return params


def fold_metric(task: str, where: np.ndarray, labels: np.ndarray) -> Callable:
    """The early-stopping metric on the held-out fold's rows of the training matrix (weight zero there), unweighted
    as XGBoost scores an eval set: rmse, logloss or mlogloss."""
    truth = labels[where]

    def metric(predt: np.ndarray, _):
        p = predt[where]
        if task == "regression":
            return "rmse", float(np.sqrt(np.mean((p - truth) ** 2)))
        p = np.clip(p, 1e-16, 1 - 1e-16)
        if task == "binary":
            return "logloss", float(-np.mean(truth * np.log(p) + (1 - truth) * np.log(1 - p)))
        p = p.reshape(len(where), -1)
        return "mlogloss", float(-np.mean(np.log(p[np.arange(len(where)), truth.astype(np.int64)])))

    return metric
