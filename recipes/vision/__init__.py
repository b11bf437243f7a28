"""Vision: image classification, from scratch and by transfer from pretrained weights.

- ``resnet.py``: ``vision/resnet`` (a compact ResNet, or any timm model, trained from scratch with SGD-Nesterov
  and test-time augmentation) and ``vision/finetune`` (two-stage transfer: the new head on a frozen backbone,
  then the backbone at a lower LR);
- ``data.py``: vision's own data steps (settings that depend on the data, the arrays ``zoo data prepare`` writes,
  batch augmentation, MixUp/CutMix);
- ``evaluation.py``: test-time views, the scores of a set of logits, the test split scored once after training;
- ``models.py``: layer groups of a backbone, for layer-wise LR decay and partial unfreezing; the trained model
  saved, loaded back and exported.

Datasets and image folders are shared with the other image domains in ``recipe_zoo.recipes.images``, the
backbones themselves in ``recipe_zoo.recipes.backbones``.
"""
