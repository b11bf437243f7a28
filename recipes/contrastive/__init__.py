"""Contrastive: self-supervised image representations, learned without labels and scored on frozen features.

- ``simclr.py``: ``contrastive/simclr`` (two augmented views, NT-Xent against in-batch negatives) and
  ``contrastive/byol`` (an online predictor chasing an EMA target, no negatives); predict: images to embeddings;
- ``evaluation.py``: frozen-feature evaluation (embeddings, kNN, the linear probe), for training and predict;
- ``data.py``: unlabelled and labelled images, the two-view augmentation;
- ``models.py``: the backbone (the shared image backbones without their classifier), projection heads, BYOL's
  target network.

What a run keeps is the backbone, in the layout ``vision/resnet weights=RUN_DIR`` loads for fine-tuning.
"""
