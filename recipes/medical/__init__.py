"""Medical imaging: self-configuring 2-D / 3-D segmentation on MONAI (``medical/unet``, ``medical/swinunetr``).

The nnU-Net idea: derive the configuration from the data (here also from the compute budget).
Networks, transforms, losses, the sliding-window inferer and the metrics are MONAI's own.

- ``data.py``: reading images and masks, label checks and mapping, the named datasets, own folders and
  Decathlon folders, fixed splits, the doctor's view, preprocessing to the plan, slices, patches and
  augmentation;
- ``plan.py``: the self-configuring part: the dataset fingerprint, the plan from fingerprint, config,
  device and budget, its description, and the measured network cost it sizes patches by;
- ``models.py``: the MONAI UNet / BasicUNet / SwinUNETR, class weights and the loss;
- ``inference.py``: sliding-window evaluation with mirrored views and the metrics, masks written back in
  each input's geometry, what a run saves for use (model.json, predictions.csv) and ``zoo predict``'s work;
- ``unet.py``: ``medical/unet`` and ``medical/swinunetr`` (config, predict options and hook, training).
"""
