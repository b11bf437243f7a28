"""Molecular property prediction from SMILES, on seeded random or Bemis-Murcko scaffold splits.

- ``dmpnn.py``: ``molecules/dmpnn``, a directed message-passing network over bonds (chemprop's D-MPNN) in
  plain torch, with RDKit descriptors beside the readout; k-fold and ensembles.
- ``fp_xgb.py``: ``molecules/fp-xgb``, Morgan count fingerprints (+ RDKit descriptors) into XGBoost: the strong
  classical baseline.
- ``config.py``: ``MolConfig``, the settings both share, and each recipe's own (``DMPNNConfig``,
  ``FPXGBConfig``); ``datasets.py``: the MoleculeNet sets (their SMILES column, targets, rows known not to parse);
  ``table.py``: reading and standardising the molecules; ``features.py``: atom/bond features, descriptors and
  fingerprints (cached on disk by ``feature_cache.py``); ``splits.py``: seeded random or scaffold splits and folds;
  ``scoring.py``: the metrics and the final scoring of every split; ``run_data.py``: what both recipes do first
  (the table logged, the splits recorded, the first split for ``zoo doctor``); ``models.py``: the D-MPNN and its
  batches; ``inference.py``: what both predict hooks share (the card's featuriser, a CSV of SMILES read with invalid
  rows kept blank and counted, the run's own splits rebuilt and scored again).
"""
