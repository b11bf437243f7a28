"""Medical data: reading images and masks, checking them and mapping mask values to classes, the named
datasets (MONAI's synthetic scenes, ISBI 2012: declared in ``datasets.py``), own image/mask folders and Decathlon
folders. The split into train / validation / test is ``split.py``'s; preprocessing to the plan ``preprocess.py``'s.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core import datasets
from recipe_zoo.core.datasets import DatasetInfo
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.medical import datasets as _datasets  # noqa: F401  (declares the domain's datasets)

# =============================================================================================
# Data: raw cases, checked and mapped to class indices
# =============================================================================================

IMAGE_SUFFIXES = (".nii.gz", ".nii", ".png", ".tif", ".tiff", ".jpg", ".jpeg", ".bmp", ".mha", ".nrrd")


@dataclass
class RawCase:
    name: str
    image: np.ndarray  # (C, *spatial) float32
    label: np.ndarray  # (1, *spatial) class indices (uint8)
    spacing: tuple[float, ...]
    source: str = ""  # image file, for error messages
    key: str = ""  # what the split hashes: the image's path relative to the dataset root (or the scene's name)


@dataclass
class SegData:
    cases: list[RawCase]  # every labelled case; ``split_cases`` deals them into train / validation / test
    classes: list[str]  # index 0 = background
    name: str
    symmetric_axes: tuple[int, ...] = ()
    modality: str = ""  # e.g. CT / MRI from dataset.json
    folds: int = 0  # folds=-1 (auto) means this: k-fold for too few cases to hold out a test set, else 0
    values: list[int] | None = None  # the mask value of each class (predicted masks are written in them); None: 0..K-1


def _stem(path: Path) -> str:
    name = path.name
    for suffix in IMAGE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return path.stem


def read_image(path: Path):
    """(C, *spatial) float32 array and spacing, through MONAI's readers (NIfTI, PNG, TIFF, ...)."""
    from monai.data import PILReader
    from monai.transforms import LoadImage

    if not path.is_file():
        raise ZooError(f"{path}: file not found")
    # TIFF through PIL (MONAI picks no reader for it without ITK), axes as MONAI lays out a PNG
    reader = PILReader() if path.suffix.lower() in (".tif", ".tiff") else None
    try:
        image = LoadImage(reader=reader, image_only=True, ensure_channel_first=True)(str(path))
    except Exception as exc:  # each reader raises its own error type for a corrupt file
        raise ZooError(f"{path}: cannot read image ({str(exc).splitlines()[0][:160]})") from None
    spacing = tuple(float(s) for s in image.pixdim)[:image.ndim - 1]
    return np.asarray(image, dtype=np.float32), spacing


def check_label(label: np.ndarray, path: Path, image_shape: tuple, image_path: Path) -> np.ndarray:
    """One channel of whole numbers with the image's spatial shape."""
    if label.shape[0] > 1:
        if not all(np.array_equal(label[0], c) for c in label[1:]):
            raise ZooError(f"{path}: mask has {label.shape[0]} different channels; expected one label channel")
        label = label[:1]
    if label.shape[1:] != tuple(image_shape[1:]):
        raise ZooError(f"{path}: mask shape {label.shape[1:]} does not match image {image_path.name} "
                       f"shape {tuple(image_shape[1:])}")
    if not np.all(np.isfinite(label)) or not np.array_equal(label, np.round(label)):
        raise ZooError(f"{path}: mask values are not whole numbers (is this an image rather than a mask?)")
    return label


def map_labels(labels: list[np.ndarray], values: list[int] | None,
               paths: list[Path]) -> tuple[list[np.ndarray], list[int]]:
    """Mask values -> class indices 0..K-1 (``values`` in class order); a value outside it names its file."""
    if values is None:
        uniques = [np.unique(label) for label in labels]
        found = sorted({int(v) for u in uniques for v in u})
        if len(found) > 32:
            worst = max(range(len(labels)), key=lambda i: len(uniques[i]))
            raise ZooError(f"{paths[worst]}: mask holds {len(uniques[worst])} distinct values ({len(found)} across "
                           "the masks); a segmentation mask holds class values: give label_values=... or check "
                           "the mask folder")
        values = found
    known = np.array(values)
    order = np.argsort(known)
    mapped = []
    for label, path in zip(labels, paths):
        present = np.unique(label)
        bad = present[~np.isin(present, known)]
        if bad.size:
            raise ZooError(f"{path}: unexpected label value {int(bad[0])} (expected one of {values})")
        mapped.append(order[np.searchsorted(known[order], label)].astype(np.uint8))
    return mapped, values


def parse_ints(text: str, key: str) -> list[int] | None:
    if not text or text == "auto":
        return None
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise ZooError(f"{key}={text!r}: expected comma-separated whole numbers") from None


def parse_floats(text: str, key: str) -> list[float] | None:
    if not text:
        return None
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise ZooError(f"{key}={text!r}: expected comma-separated numbers") from None
    if any(v <= 0 or not math.isfinite(v) for v in values):
        raise ZooError(f"{key}={text!r}: values must be positive")
    return values


def load_pairs(images: list[Path], labels: list[Path], values: list[int] | None,
               root: Path) -> tuple[list[RawCase], list[int]]:
    pairs = []
    for image_path, label_path in zip(images, labels):
        image, spacing = read_image(image_path)
        bad = int((~np.isfinite(image)).sum())
        if bad:
            raise ZooError(f"{image_path}: {bad} voxels are NaN or infinite")
        label, _ = read_image(label_path)
        pairs.append((image, check_label(label, label_path, image.shape, image_path), spacing))
    if not pairs:
        raise ZooError("no image/mask pairs found")
    mapped, values = map_labels([p[1] for p in pairs], values, labels)
    cases = [RawCase(_stem(path), image, label, spacing, str(path), _relative(path, root))
             for path, (image, _, spacing), label in zip(images, pairs, mapped)]
    channels = [c.image.shape[0] for c in cases]
    if len(set(channels)) > 1:
        usual = max(set(channels), key=channels.count)
        odd = next(c for c in cases if c.image.shape[0] != usual)
        raise ZooError(f"{odd.source}: {odd.image.shape[0]} channel(s), but most images have {usual} "
                       f"(channel counts found: {sorted(set(channels))})")
    return cases, values


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # a dataset.json entry outside the folder: its path as listed
        return path.as_posix()


def folds_for(n_cases: int) -> int:
    """Own and Decathlon folders: 5-fold cross-validation under 20 cases (a held-out test set would be 1-3
    cases), one train / validation / test split from 20 on."""
    return min(5, n_cases) if n_cases < 20 else 0


def load_synthetic(dataset: DatasetInfo) -> SegData:
    from monai.data.synthetic import create_test_image_2d, create_test_image_3d

    rs = np.random.RandomState(0)  # fixed: the same 40 scenes in every run
    cases = []
    for i in range(40):
        if dataset.info["dims"] == 2:
            image, label = create_test_image_2d(128, 128, num_objs=12, rad_max=20, rad_min=4, noise_max=0.5,
                                                num_seg_classes=2, channel_dim=0, random_state=rs)
        else:
            image, label = create_test_image_3d(64, 64, 64, num_objs=10, rad_max=14, rad_min=4, noise_max=0.5,
                                                num_seg_classes=2, channel_dim=0, random_state=rs)
        cases.append(RawCase(f"synthetic{i}", image.astype(np.float32), label.astype(np.uint8),
                             (1.0,) * dataset.info["dims"], key=f"synthetic{i}"))
    return SegData(cases, ["background", "class1", "class2"], dataset.name, dataset.info["symmetric_axes"])


def load_isbi(dataset: DatasetInfo, values: list[int] | None) -> SegData:
    root, known = datasets.locate(dataset.name), list(dataset.info["label_values"])
    ids = list(range(30))
    missing = [root / d / f"{i}.png" for i in ids for d in ("image", "label") if not (root / d / f"{i}.png").is_file()]
    if missing:
        raise ZooError(f"{missing[0]}: file not found ({len(missing)} of the 60 ISBI 2012 files are missing)")
    cases, values = load_pairs([root / "image" / f"{i}.png" for i in ids], [root / "label" / f"{i}.png" for i in ids],
                               values or known, root)
    names = list(dataset.info["classes"]) if values == known else [f"value{v}" for v in values]
    # 30 slices: too few for a held-out test set, so 5 folds of 6 test slices, each with an inner validation
    return SegData(cases, names, dataset.name, dataset.info["symmetric_axes"], folds=5, values=values)


MASK_DIRS, IMAGE_DIRS = ("masks", "labels", "label", "labelsTr"), ("images", "image", "imagesTr")


def load_msd(root: Path, values: list[int] | None) -> SegData:
    """A Decathlon-style folder: dataset.json (MSD or nnU-Net v2 keys), imagesTr/, labelsTr/."""
    try:
        meta = json.loads((root / "dataset.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ZooError(f"{root / 'dataset.json'}: cannot read ({exc})") from None
    if not isinstance(meta, dict):
        raise ZooError(f"{root / 'dataset.json'}: expected a JSON object with 'labels' and 'training'")
    labels = meta.get("labels")
    if not isinstance(labels, dict) or not labels:
        raise ZooError(f"{root / 'dataset.json'}: no 'labels' mapping")
    try:  # MSD: {"0": "background", ...}; nnU-Net v2: {"background": 0, ...}
        by_value = ({int(k): str(v) for k, v in labels.items()} if all(str(k).isdigit() for k in labels)
                    else {int(v): str(k) for k, v in labels.items()})
    except (TypeError, ValueError):
        raise ZooError(f"{root / 'dataset.json'}: 'labels' must map values to names (or names to values)") from None
    if "training" in meta:
        entries = meta["training"]
        if not isinstance(entries, list):
            raise ZooError(f"{root / 'dataset.json'}: 'training' must be a list of {{'image', 'label'}} entries")
        images, masks = [], []
        for number, e in enumerate(entries, 1):
            if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in ("image", "label")):
                raise ZooError(f"{root / 'dataset.json'}: 'training' entry {number} needs 'image' and 'label' paths "
                               f"(got {str(e)[:80]})")
            images.append(root / e["image"])
            masks.append(root / e["label"])
    else:  # nnU-Net v2: imagesTr/<case>_0000.nii.gz and labelsTr/<case>.nii.gz
        masks = sorted((root / "labelsTr").glob("*.nii*"))
        images = [root / "imagesTr" / (_stem(m) + "_0000" + m.name[len(_stem(m)):]) for m in masks]
    for path in images + masks:
        if not path.is_file():
            raise ZooError(f"{path}: listed in dataset.json but not found")
    values = values or sorted(by_value)
    cases, values = load_pairs(images, masks, values, root)
    modality = meta.get("modality") or meta.get("channel_names") or {}
    modality = str(next(iter(modality.values()), "")) if isinstance(modality, dict) else str(modality)
    return SegData(cases, [by_value.get(v, f"value{v}") for v in values], root.name, (), modality,
                   folds=folds_for(len(cases)), values=values)


def load_folder(root: Path, values: list[int] | None) -> SegData:
    """``root/images`` (or image/, imagesTr/) and ``root/masks`` (or labels/, label/), matched by file name."""
    image_dir = next((root / d for d in IMAGE_DIRS if (root / d).is_dir()), None)
    mask_dir = next((root / d for d in MASK_DIRS if (root / d).is_dir()), None)
    if image_dir is None or mask_dir is None:
        raise ZooError(f"{root}: expected an images/ and a masks/ (or labels/) folder, or a dataset.json")
    found = {d: {_stem(p): p for p in sorted(d.iterdir()) if p.is_file() and p.name.lower().endswith(IMAGE_SUFFIXES)}
             for d in (image_dir, mask_dir)}
    if not found[image_dir]:
        raise ZooError(f"{image_dir}: no images (png, tif, nii.gz, ...) found")
    for d, other in ((image_dir, mask_dir), (mask_dir, image_dir)):
        lonely = sorted(set(found[d]) - set(found[other]))
        if lonely:
            raise ZooError(f"{found[d][lonely[0]]}: no matching file in {other} ({len(lonely)} unpaired in {d.name}/)")
    stems = sorted(found[image_dir])
    cases, values = load_pairs([found[image_dir][s] for s in stems], [found[mask_dir][s] for s in stems], values,
                               root)
    names = ["background"] + [f"class{i}" for i in range(1, len(values))]
    return SegData(cases, names, root.name, folds=folds_for(len(cases)), values=values)


def named_datasets() -> list[DatasetInfo]:
    """The medical datasets this module reads (``datasets.py``: each says its ``kind``), the generated scenes first."""
    known = [d for d in datasets.DATASETS.values() if d.domain == "medical" and "kind" in d.info]
    return sorted(known, key=lambda d: d.source != "bundled")


def load_data(data: str, label_values: str) -> SegData:
    """``data``: a dataset's name, a Decathlon folder or an image/mask folder; ``label_values``: the mask values in
    class order ('' or 'auto': the dataset's, or the values found)."""
    values = parse_ints(label_values, "label_values")
    named = {d.name: d for d in named_datasets()}
    if data in named:
        dataset = named[data]
        return load_synthetic(dataset) if dataset.info["kind"] == "synthetic" else load_isbi(dataset, values)
    root = Path(data)
    if not root.exists():
        raise ZooError(f"data={data!r}: not a medical dataset ({', '.join(named)}) nor an existing folder")
    if not root.is_dir():
        raise ZooError(f"data={data!r}: expected a folder (dataset.json + imagesTr/labelsTr, or images/ + masks/)")
    if (root / "dataset.json").is_file():
        return load_msd(root, values)
    return load_folder(root, values)
