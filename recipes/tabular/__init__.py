"""Tables: gradient-boosted trees done right and a neural network for large tables.

- ``xgb.py``: ``tabular/xgb``, XGBoost hist with native categoricals, depth and log target chosen on the
  validation rows, then bagged over folds of the training rows; importances saved. ``dask_engine.py``: its models
  trained by ``xgboost.dask`` (``engine=dask``); ``stream_xgb.py``: its models on a table read a chunk at a time
  (``stream=true``: ``stream.py``).
- ``mlp.py``: ``tabular/mlp``, an MLP (or a small FT-Transformer) through the core loop; ``encoded.py``: its
  input written to disk once and read a batch at a time (``stream=true``).
- ``config.py``: ``TabularConfig``, the settings both share, and each recipe's own (``XGBConfig``,
  ``MLPConfig``); ``datasets.py``: the named tables, each with its target column and how it is read; ``data.py``:
  reading the table and its bad inputs, the metrics, sample weights and the log-target choice; ``features.py``: a
  split's features and their plan (``neighbours.py``: neighbour features); ``split.py``: the splits;
  ``protocol.py``: each split's features, the loop over splits and the test rows scored once; ``models.py``: the
  networks and their input; ``inference.py``: what a run saves for ``zoo predict`` (``preprocess.json``,
  ``predictions.csv``, the card) and the predict driver both share.

Three parts: test (the dataset's test file or a ``split_seed`` split), validation (a carve-out of the rest by a
hash of each row's content: the same rows for every seed) and train. Every choice reads validation; the test rows
are scored once, at the end, with a bootstrap interval.
"""
