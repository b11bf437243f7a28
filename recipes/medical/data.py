"""Medical data: reading images and masks, checking them and mapping mask values to classes, the named
datasets (MONAI's synthetic scenes, ISBI 2012), own image/mask folders and Decathlon folders; the split into
train / validation / test (or k folds, each with an inner validation) by a hash of each case's key; then
preprocessing to the plan (resampling, normalisation, 2-D slices), and the patch sampler with its MONAI
augmentation, seeded per batch so a resumed run replays it exactly.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from recipe_zoo.core.batches import batch_seed
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.splits import hash_unit

if TYPE_CHECKING:
    from recipe_zoo.recipes.medical.unet import MedicalConfig

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


def load_synthetic(dims: int) -> SegData:
    from monai.data.synthetic import create_test_image_2d, create_test_image_3d

    rs = np.random.RandomState(0)  # fixed: the same 40 scenes in every run
    cases = []
    for i in range(40):
        if dims == 2:
            image, label = create_test_image_2d(128, 128, num_objs=12, rad_max=20, rad_min=4, noise_max=0.5,
                                                num_seg_classes=2, channel_dim=0, random_state=rs)
        else:
            image, label = create_test_image_3d(64, 64, 64, num_objs=10, rad_max=14, rad_min=4, noise_max=0.5,
                                                num_seg_classes=2, channel_dim=0, random_state=rs)
        cases.append(RawCase(f"synthetic{i}", image.astype(np.float32), label.astype(np.uint8), (1.0,) * dims,
                             key=f"synthetic{i}"))
    return SegData(cases, ["background", "class1", "class2"], f"synthetic-{dims}d", tuple(range(dims)))


def load_isbi(root: Path, values: list[int] | None) -> SegData:
    ids = list(range(30))
    missing = [root / d / f"{i}.png" for i in ids for d in ("image", "label") if not (root / d / f"{i}.png").is_file()]
    if missing:
        raise ZooError(f"{missing[0]}: file not found ({len(missing)} of the 60 ISBI 2012 files are missing)")
    cases, values = load_pairs([root / "image" / f"{i}.png" for i in ids], [root / "label" / f"{i}.png" for i in ids],
                               values or [255, 0], root)
    names = ["background", "membrane"] if values == [255, 0] else [f"value{v}" for v in values]
    # 30 slices: too few for a held-out test set, so 5 folds of 6 test slices, each with an inner validation
    return SegData(cases, names, "isbi2012-membrane", (0, 1), folds=5, values=values)


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


def load_data(cfg: MedicalConfig, run) -> SegData:
    values = parse_ints(cfg.label_values, "label_values")
    if cfg.data in ("synthetic-2d", "synthetic-3d"):
        return load_synthetic(int(cfg.data[-2]))
    if cfg.data == "isbi2012-membrane":
        return load_isbi(run.data_path("isbi2012-membrane"), values)
    root = Path(cfg.data)
    if not root.exists():
        raise ZooError(f"data={cfg.data!r}: not a medical dataset (synthetic-2d, synthetic-3d, isbi2012-membrane) "
                       "nor an existing folder")
    if not root.is_dir():
        raise ZooError(f"data={cfg.data!r}: expected a folder (dataset.json + imagesTr/labelsTr, or images/ + masks/)")
    if (root / "dataset.json").is_file():
        return load_msd(root, values)
    return load_folder(root, values)


# =============================================================================================
# Split: train / validation / test, or k folds each with an inner validation, by a hash of each case's key
# =============================================================================================

@dataclass
class Fold:
    train: list[RawCase]  # what the network trains on and the plan reads
    val: list[RawCase]  # every evaluation during training, and val_dice
    test: list[RawCase]  # scored once, after training


def hash_order(keys: list[str], salt: str) -> list[str]:
    """The keys ordered by their hash: an order fixed by the keys alone (not their input order, not the seed)."""
    return sorted(keys, key=lambda k: (hash_unit(k, salt), k))


def hold_out(keys: list[str], fraction: float, salt: str, where: str) -> tuple[list[str], list[str]]:
    """(kept, held out): the ``fraction`` of the keys (rounded down, at least one) with the lowest hashes held
    out; an exact count rather than a threshold, since a few dozen cases would leave the size to chance."""
    n = max(1, int(fraction * len(keys)))
    if n >= len(keys):
        raise ZooError(f"{where}: holding out {fraction:.0%} of {len(keys)} cases leaves none to train on")
    held = set(hash_order(keys, salt)[:n])
    return sorted(k for k in keys if k not in held), sorted(held)


def split_keys(keys: list[str], folds: int, val_fraction: float, test_fraction: float,
               where: str = "data") -> list[tuple[list[str], list[str], list[str]]]:
    """(train, validation, test) keys: one split (``folds=0``: test, then validation out of the rest), or k
    folds of the hash order as test sets, each with an inner validation of its other cases (salted per fold,
    so every case is trained on in some fold)."""
    if folds == 0:
        rest, test = hold_out(keys, test_fraction, "test", where)
        return [(*hold_out(rest, val_fraction, "validation", where), test)]
    order = hash_order(keys, "fold")
    parts = []
    for k in range(folds):
        test = sorted(key for i, key in enumerate(order) if i * folds // len(order) == k)
        held = set(test)
        rest = sorted(key for key in keys if key not in held)
        parts.append((*hold_out(rest, val_fraction, f"validation-fold{k}", where), test))
    return parts


def split_cases(data: SegData, folds: int, val_fraction: float, test_fraction: float) -> list[Fold]:
    """The folds (one for ``folds=0``); ``folds=-1``: the dataset's own choice (``SegData.folds``)."""
    n = len(data.cases)
    folds = data.folds if folds == -1 else folds
    if folds < 0 or folds == 1 or folds > n:
        raise ZooError(f"folds={folds}: use 0 (one train/validation/test split), -1 (auto) or 2..{n} (the cases)")
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 1:
            raise ZooError(f"{name}={value}: must be between 0 and 1")
    if n < 3 or (folds and n - math.ceil(n / folds) < 2):
        raise ZooError(f"{data.name}: {n} cases are too few to train, validate and test on (at least 3, and "
                       "2 outside each fold)")
    by_key = {c.key: c for c in data.cases}
    if len(by_key) < n:
        raise ZooError(f"{data.name}: two cases share a key ({n - len(by_key)} duplicate image paths)")
    parts = split_keys(list(by_key), folds, val_fraction, test_fraction, data.name)
    return [Fold(*([by_key[k] for k in keys] for keys in part)) for part in parts]


def inspect_view(*splits: list[RawCase]) -> list[tuple]:
    """``run.inspect``'s (inputs, labels) per split: the images stacked when every case shares one shape, else
    one content digest per case (exact duplicates still match across splits); the labels as all their voxels."""
    import hashlib

    def digest(image: np.ndarray) -> str:
        h = hashlib.blake2b(str(image.shape).encode(), digest_size=12)
        h.update(np.ascontiguousarray(image))
        return h.hexdigest()

    same = len({c.image.shape for split in splits for c in split}) == 1
    return [(np.stack([c.image for c in split]) if same else [digest(c.image) for c in split],
             np.concatenate([c.label.ravel() for c in split])) for split in splits]


# =============================================================================================
# Preprocessing: resample to the plan's spacing, normalise, cut 2-D slices out of volumes
# =============================================================================================

@dataclass
class Case:
    name: str
    image: torch.Tensor  # (C, *spatial) float32, normalised
    label: torch.Tensor  # (1, *spatial) uint8 class index


def preprocess(raw: RawCase, plan: dict, fp: dict) -> Case:
    from monai.transforms import Zoom

    image, label = raw.image, raw.label
    zoom = [a / b for a, b in zip(raw.spacing, plan["spacing"])]
    if any(abs(z - 1) > 0.01 for z in zoom):
        image = np.asarray(Zoom(zoom, mode="area" if min(zoom) < 1 else "trilinear" if len(zoom) == 3 else "bilinear",
                                keep_size=False)(image))
        label = np.asarray(Zoom(zoom, mode="nearest", keep_size=False)(label))
    image = image.astype(np.float32)
    if plan["normalize"] == "zscore":  # per image and channel
        axes = tuple(range(1, image.ndim))
        image = (image - image.mean(axis=axes, keepdims=True)) / np.maximum(image.std(axis=axes, keepdims=True), 1e-6)
    elif plan["normalize"] == "ct":  # clip to the foreground's 0.5-99.5 percentiles, then its mean/std
        stats = fp["intensity_fg"]
        image = (np.clip(image, stats["p00_5"], stats["p99_5"]) - stats["mean"]) / max(stats["std"], 1e-6)
    return Case(raw.name, torch.from_numpy(np.ascontiguousarray(image)), torch.from_numpy(label.astype(np.uint8)))


def slices(case: Case, axis: int) -> list[Case]:
    """2-D training cases from a volume, across ``axis`` (a spatial axis index)."""
    image, label = case.image.movedim(axis + 1, 0), case.label.movedim(axis + 1, 0)
    return [Case(f"{case.name}[{i}]", image[i], label[i]) for i in range(image.shape[0])]


# =============================================================================================
# Patches and augmentation (MONAI transforms, seeded per batch so resume replays them exactly)
# =============================================================================================

def augmentation(cfg: MedicalConfig, plan: dict, flip_axes: tuple[int, ...]):
    """The patch pipeline (MONAI Compose) and the crop size it starts from (the patch plus a margin
    when rotation or zoom will cut the patch out of it)."""
    from monai import transforms as T

    keys, patch, dims = ["image", "label"], plan["patch"], plan["dims"]
    spatial = cfg.spatial_prob > 0 and (cfg.rotate > 0 or cfg.zoom > 0 or cfg.elastic)
    crop = [int(math.ceil(p * 1.25)) for p in patch] if spatial else patch  # margin for rotation and zoom
    pos = cfg.fg_fraction / max(1e-6, 1 - cfg.fg_fraction)
    steps = [T.RandCropByPosNegLabeld(keys, "label", crop, pos=pos if cfg.fg_fraction < 1 else 1.0,
                                      neg=1.0 if cfg.fg_fraction < 1 else 0.0, num_samples=1,
                                      fg_indices_key="fg", bg_indices_key="bg")]
    if spatial:
        angle = math.radians(cfg.rotate)
        rotate = (angle,) if dims == 2 else (angle, angle, angle)
        common = dict(spatial_size=patch, prob=cfg.spatial_prob, rotate_range=rotate, scale_range=cfg.zoom,
                      mode=("bilinear", "nearest"), padding_mode="zeros")
        if cfg.elastic and dims == 2:
            steps.append(T.Rand2DElasticd(keys, spacing=[p // 4 for p in patch], magnitude_range=(1, 2), **common))
        elif cfg.elastic:
            steps.append(T.Rand3DElasticd(keys, sigma_range=(5, 8), magnitude_range=(50, 150), **common))
        else:
            steps.append(T.RandAffined(keys, **common))
    for axis in flip_axes:
        steps.append(T.RandFlipd(keys, prob=0.5, spatial_axis=axis))
    square = [a for a in flip_axes if patch[a] == patch[flip_axes[0]]]
    if len(square) >= 2:  # a right angle is as symmetric as a flip when both axes are
        steps.append(T.RandRotate90d(keys, prob=0.5, max_k=3, spatial_axes=tuple(square[:2])))
    if cfg.intensity > 0:
        steps += [T.RandScaleIntensityd("image", factors=cfg.intensity, prob=0.5),
                  T.RandShiftIntensityd("image", offsets=cfg.intensity, prob=0.5)]
    if cfg.noise > 0:
        steps.append(T.RandGaussianNoised("image", prob=0.15, std=cfg.noise))
    return T.Compose(steps), crop


class PatchBatches:
    """Random patches from whole cases; one "epoch" is as many patch voxels as the training cases hold.

    Every batch draws from a generator seeded by (seed, epoch, index), so the state is a position.
    """

    def __init__(self, cases: list[Case], augment, batch_size: int, patch: list[int], seed: int):
        from monai.transforms import SpatialPad

        transform, crop = augment
        pad = SpatialPad(crop)  # cases smaller than the crop are padded once, before locations are taken
        rng = np.random.default_rng(seed)
        self.items = []
        for c in cases:  # foreground/background locations, at most 10,000 of each per case (nnU-Net)
            image, label = (pad(t).as_subclass(torch.Tensor) for t in (c.image, c.label))
            flat = label[0].numpy().ravel()
            fg, bg = np.flatnonzero(flat), np.flatnonzero(flat == 0)
            fg, bg = (rng.choice(v, size=min(v.size, 10_000), replace=False) if v.size else v for v in (fg, bg))
            self.items.append({"image": image, "label": label, "fg": fg, "bg": bg})
        self.transform, self.batch_size, self.seed = transform, batch_size, seed
        voxels = sum(c.label.numel() for c in cases)
        self.slots_per_epoch = max(1, voxels // (batch_size * math.prod(patch)))
        self.epoch, self.index = 0, 0
        self.rank, self.world = 0, 1

    def shard(self, rank: int, world: int) -> None:
        """Under N processes ``index`` is the step's position in the epoch counted in slots and rank r draws
        the patches of slot ``index + r``: a step's N micro-batches are the slots one process accumulating N
        micro-batches draws, across an epoch boundary too (a slot past the epoch's end is the matching slot
        of the next epoch, with that epoch's seed) rather than dropping the slots that do not divide by N."""
        self.rank, self.world = rank, world

    @property
    def batches_per_epoch(self) -> int:
        return max(1, self.slots_per_epoch // self.world)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        per_epoch = self.slots_per_epoch
        if self.index >= per_epoch:
            self.epoch, self.index = self.epoch + self.index // per_epoch, self.index % per_epoch
        ahead, slot = divmod(self.index + self.rank, per_epoch)  # ahead > 0: this slot opens a later epoch
        epoch = self.epoch + ahead
        seed = batch_seed(self.seed, epoch, slot) % 2**32  # MONAI's random states take 32 bits
        rng = np.random.default_rng(seed)
        self.transform.set_random_state(seed=seed)
        samples = [self.transform(self.items[i])[0] for i in rng.integers(0, len(self.items), self.batch_size)]
        self.index += self.world
        x = torch.stack([torch.as_tensor(s["image"]).as_subclass(torch.Tensor) for s in samples])
        y = torch.stack([torch.as_tensor(s["label"]).as_subclass(torch.Tensor) for s in samples])
        return x.float(), y.long()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
