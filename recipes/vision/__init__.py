"""Vision: image classification, from scratch and by transfer from pretrained weights.

- ``resnet.py``: ``vision/resnet`` (a compact ResNet, or any timm model, trained from scratch with SGD-Nesterov
  and test-time augmentation) and ``vision/finetune`` (two-stage transfer: the new head on a frozen backbone,
  then the backbone at a lower LR);
- ``data.py``: vision's own data steps (settings that depend on the data, batch augmentation, MixUp/CutMix);
- ``models.py``: layer groups of a backbone, for layer-wise LR decay and partial unfreezing.

Datasets, image folders and the backbones themselves are shared with the other image domains in
``recipe_zoo.recipes.images``.
"""
