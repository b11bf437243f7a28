"""Medical imaging: self-configuring 2-D / 3-D segmentation on MONAI (``medical/unet``, ``medical/swinunetr``).

The nnU-Net idea: derive the configuration from the data (here also from the compute budget).
Networks, transforms, losses, the sliding-window inferer and the metrics are MONAI's own.

- ``datasets.py``: the named datasets (ISBI 2012 in the data cache, MONAI's synthetic 2-D and 3-D scenes);
- ``data.py``: reading images and masks, label checks and mapping, the named datasets, own folders and
  Decathlon folders; ``split.py``: fixed splits by a hash of each case (folds too) and the doctor's view;
- ``preprocess.py``: preprocessing to the plan and 2-D slices; ``patches.py``: patches and augmentation;
- ``plan.py``: the self-configuring part: the dataset fingerprint, the plan from fingerprint, the settings the
  user fixed, device and budget, its description, and the measured network cost it sizes patches by;
- ``models.py``: the MONAI UNet / BasicUNet / SwinUNETR, class weights and the loss;
- ``evaluation.py``: sliding-window evaluation with mirrored views and the metrics; ``masks.py``: masks written
  back in each input's geometry and label values;
- ``inference.py``: what a run saves for use (model.json, predictions.csv), its models loaded back and
  ``zoo predict``'s work;
- ``unet.py``: ``medical/unet`` and ``medical/swinunetr`` (config, predict and plan hooks, training).
"""
