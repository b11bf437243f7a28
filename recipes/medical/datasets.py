"""Segmentation sets: the ISBI 2012 EM membranes in the data cache, MONAI's synthetic 2-D and 3-D scenes."""
from __future__ import annotations

from recipe_zoo.core.datasets import DatasetInfo, Download, dataset

dataset(DatasetInfo(
    name="isbi2012-membrane", domain="medical", source="cache", path="medical_seg/isbi2012_membrane/train",
    description="ISBI 2012 EM stack (Drosophila VNC): 30 serial-section TEM slices, 512x512, membrane masks "
                "(mask value 0 = membrane, 22% of pixels; 255 = cell interior)",
    split="5-fold cross-validation of the 30 slices by a hash of each path; validation 20% of each fold's rest", metric="membrane Dice, mIoU",
    downloads=(Download("https://github.com/zhixuhao/unet/archive/b45af4d458437d8281cc218a07fd4380818ece4a.tar.gz",
                        sha256=None, archive_root="unet-b45af4d458437d8281cc218a07fd4380818ece4a/data/membrane/train",
                        select=(("image", 30), ("label", 30))),),
    tree_sha256="69966995f5981bdac6b55d41da3d37fc57c2826ca6fbc966c001efc876f41d4c",
    info={"kind": "isbi", "label_values": (255, 0), "classes": ("background", "membrane"), "symmetric_axes": (0, 1)}))
for _dims in (2, 3):
    dataset(DatasetInfo(
        name=f"synthetic-{_dims}d", domain="medical", source="bundled",
        description=f"MONAI's synthetic {_dims}-D images (monai.data.synthetic): 40 noisy {'128x128' if _dims == 2 else '64^3'} "
                    "scenes of random circles/spheres, 2 foreground classes (fixed generator seed)",
        split="test 20% of the 40 by a hash of each case, validation 20% of the rest (generated)",
        metric="mean foreground Dice, mIoU",
        info={"kind": "synthetic", "dims": _dims, "symmetric_axes": tuple(range(_dims))}))
