"""Predicted masks in each input's own geometry and label values: back on the case's grid, named by its key, written
as PNG for 2-D images and NIfTI with the input's affine and header for volumes, with each case's row for the CSV.
"""
from __future__ import annotations

import warnings
from pathlib import Path, PurePosixPath

import numpy as np
import torch
import torch.nn.functional as F

from recipe_zoo.core import distributed
from recipe_zoo.recipes.medical.data import IMAGE_SUFFIXES, RawCase


def _is_nifti(path: str) -> bool:
    return path.lower().endswith((".nii", ".nii.gz"))


def mask_name(key: str, source: str, spatial_dims: int) -> str:
    """The mask's path under the outputs folder: the case's key (its path in the data) as NIfTI for NIfTI inputs
    and volumes, else as PNG; never above the folder."""
    parts = [p for p in PurePosixPath(key.replace("\\", "/")).parts if p not in ("/", "..", ".")]
    name = "/".join(parts) or "case"
    for suffix in IMAGE_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[:-len(suffix)]
            break
    return name + (".nii.gz" if _is_nifti(source) or spatial_dims == 3 else ".png")


def in_geometry(probs: torch.Tensor, shape) -> torch.Tensor:
    """Probabilities (K, *plan's grid) on the case's own grid (linear; the plan resampled it to its spacing)."""
    if tuple(probs.shape[1:]) == tuple(shape):
        return probs
    mode = "bilinear" if len(shape) == 2 else "trilinear"
    return F.interpolate(probs[None].float(), size=tuple(shape), mode=mode, align_corners=False)[0]


def save_mask(path: Path, mask: np.ndarray, values: list[int], source: str, spacing) -> None:
    """Class indices written as the masks' values: PNG (axes back from MONAI's width-first order), or NIfTI with
    the source volume's affine and header (else the spacing as the affine)."""
    out = np.asarray(values)[mask]
    dtype = np.uint8 if out.min() >= 0 and out.max() < 256 else np.uint16 if out.min() >= 0 else np.int32
    out = out.astype(dtype)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".png"):
        from PIL import Image

        Image.fromarray(np.ascontiguousarray(out.T)).save(path)
        return
    import nibabel as nib

    if _is_nifti(source):
        ref = nib.load(source)
        header = ref.header.copy()
        header.set_data_dtype(dtype)
        image = type(ref)(out, ref.affine, header)
        image.header.set_slope_inter(1, 0)  # the source's intensity scaling does not apply to labels
    else:
        image = nib.Nifti1Image(out, np.diag([*spacing, 1.0]))
    nib.save(image, str(path))


class MaskWriter:
    """Each case's probabilities -> its mask on its own grid, written under ``folder`` (main process only), with
    its name and foreground fraction for the CSV row. Called as ``score_cases``' ``each`` for ``cases``, or
    ``add(raw, probs)`` one case at a time. ``masks`` (when kept): class indices, not the label values."""

    def __init__(self, folder: Path | None, values: list[int], cases: list[RawCase] = (), keep: bool = False,
                 progress=None):
        self.folder, self.values, self.cases, self.keep, self.progress = folder, values, list(cases), keep, progress
        self.items: list[tuple[str, str, float]] = []  # (file, mask, foreground fraction)
        self.masks: list[np.ndarray] = []  # class indices, when kept (the Python API's arrays)
        self.files: list[Path] = []
        self.names: set[str] = set()

    def __call__(self, i: int, probs: torch.Tensor) -> None:
        self.add(self.cases[i], probs)

    def add(self, raw: RawCase, probs: torch.Tensor) -> np.ndarray:
        mask = in_geometry(probs, raw.image.shape[1:]).argmax(0).numpy().astype(np.uint8)
        key = raw.key or raw.name
        name = mask_name(key, raw.source, mask.ndim)
        if name in self.names:  # a.png beside a.jpg: the second keeps its suffix in the name
            name = mask_name(key.replace(".", "_"), raw.source, mask.ndim)
        self.names.add(name)
        if self.folder is not None and distributed.is_main():
            save_mask(self.folder / name, mask, self.values, raw.source, raw.spacing)
            self.files.append(self.folder / name)
        self.items.append((key, name, float(np.count_nonzero(mask) / mask.size)))
        if self.keep:
            self.masks.append(mask)
        if self.progress is not None:
            self.progress(len(self.items))
        return mask

    def rows(self, dice: np.ndarray | None, classes: list[str], fold: int | None = None) -> list[dict]:
        """One per case: file, (fold,) mask, foreground_fraction, and with ``dice`` (n, K) the mean foreground
        Dice and each foreground class's (blank for a class absent from the truth: MONAI's NaN)."""
        out = []
        for i, (file, name, fraction) in enumerate(self.items):
            row = {"file": file, **({"fold": fold} if fold is not None else {}), "mask": name,
                   "foreground_fraction": fraction}
            if dice is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    mean = float(np.nanmean(dice[i, 1:]))
                row["dice"] = None if np.isnan(mean) else mean
                row.update({f"dice_{c}": None if np.isnan(v) else float(v) for c, v in zip(classes[1:], dice[i, 1:])})
            out.append(row)
        return out
