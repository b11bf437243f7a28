"""Tables: gradient-boosted trees done right and a neural network for large tables.

- ``xgb.py``: ``tabular/xgb``, XGBoost hist with native categoricals, depth and log target chosen on a
  validation carve-out, then bagged over folds of the training rows; importances saved.
- ``mlp.py``: ``tabular/mlp``, an MLP (or a small FT-Transformer) through the core loop.
- ``config.py``: ``TabularConfig``, the settings both share; ``data.py``: reading the table and its bad inputs,
  splits, engineered features, metrics and the loop over splits; ``models.py``: the networks and their input.

The test rows are never used for any choice.
"""
