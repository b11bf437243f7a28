"""Applying a medical segmenter: the sliding-window evaluation with mirrored views and MONAI's metrics that the
run scores its cases with, each case's mask back in its own geometry (PNG for 2-D images, NIfTI with the input's
affine and header for volumes, in the masks' own label values), what a run saves for use (``model.json`` with every
fold's plan and fingerprint, ``predictions.csv`` and its test masks), and ``zoo predict``: new images or volumes,
or the run's own test cases scored again.
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path, PurePosixPath

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import artifact, distributed
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision
from recipe_zoo.recipes.medical.data import (IMAGE_DIRS, IMAGE_SUFFIXES, MASK_DIRS, Case, RawCase, SegData, _relative,
                                             _stem, check_label, load_data, map_labels, preprocess, read_image,
                                             split_cases)
from recipe_zoo.recipes.medical.models import build_model

# =============================================================================================
# Evaluation: sliding windows over whole images, mirrored test-time views, MONAI metrics
# =============================================================================================

def predict(model: nn.Module, case: Case, plan: dict, overlap: float, mirror_axes: tuple[int, ...],
            device: torch.device) -> torch.Tensor:
    """Class probabilities (K, *spatial) for one whole case."""
    import itertools

    from monai.inferers import sliding_window_inference

    x = case.image.unsqueeze(0).to(device)  # (1, C, *spatial)
    axis = plan["slice_axis"]
    if axis is not None:  # 2-D network on a volume: its slices become the batch
        x = x.movedim(axis + 2, 0)[:, 0]  # (S, C, a, b)

    def window(t: torch.Tensor) -> torch.Tensor:
        return sliding_window_inference(t, plan["patch"], plan["batch_size"], model, overlap=overlap,
                                        mode="gaussian").float().softmax(1)

    views = [()] + [c for r in range(1, len(mirror_axes) + 1) for c in itertools.combinations(mirror_axes, r)]
    probs = 0
    for flip in views:
        dims = [a + 2 for a in flip]
        probs = probs + (window(x.flip(dims)).flip(dims) if flip else window(x))
    probs = probs / len(views)  # (B, K, ...)
    return probs.movedim(0, axis + 1) if axis is not None else probs[0]  # slices back in place: (K, *spatial)


class CaseScores:
    """MONAI's Dice, IoU (and HD95) of one case after another: (n_cases, K) arrays from ``result``."""

    def __init__(self, k: int, hd95: bool = False):
        from monai.metrics import DiceMetric, HausdorffDistanceMetric, MeanIoU

        self.k, self.hd95 = k, hd95
        self.dice, self.iou = DiceMetric(include_background=True, reduction="none"), MeanIoU(include_background=True,
                                                                                             reduction="none")
        self.distance = HausdorffDistanceMetric(include_background=False, percentile=95, reduction="none")

    def add(self, guess: torch.Tensor, truth: torch.Tensor, spacing) -> None:
        """``guess``, ``truth``: class indices (*spatial)."""
        pred = F.one_hot(guess, self.k).movedim(-1, 0)[None]
        true = F.one_hot(truth.long(), self.k).movedim(-1, 0)[None]
        self.dice(pred, true)
        self.iou(pred, true)
        if self.hd95:
            self.distance(pred, true, spacing=spacing)

    def result(self) -> dict[str, np.ndarray]:
        scores = {"dice": self.dice.get_buffer().numpy(), "iou": self.iou.get_buffer().numpy()}
        if self.hd95:
            scores["hd95"] = self.distance.get_buffer().numpy()
        return scores


def score_cases(model: nn.Module, cases: list[Case], plan: dict, classes: list[str], device: torch.device, *,
                overlap: float, mirror_axes: tuple[int, ...] = (), hd95: bool = False,
                each=None) -> dict[str, np.ndarray]:
    """Per case and class, (n_cases, K): ``dice`` and ``iou`` (NaN for a class absent from the truth), and
    ``hd95`` (foreground classes only) when asked. ``each(i, probs)`` sees every case's probabilities."""
    scores = CaseScores(len(classes), hd95)
    for i, case in enumerate(cases):
        probs = predict(model, case, plan, overlap, mirror_axes, device).cpu()
        scores.add(probs.argmax(0), case.label[0], plan["spacing"])
        if each is not None:
            each(i, probs)
    return scores.result()


def summarize(scores: dict[str, np.ndarray], classes: list[str]) -> dict[str, float]:
    """Each class's mean over cases; ``dice`` = mean over foreground classes, ``miou`` = mean IoU over all
    classes (background included, the semantic-segmentation convention)."""
    with warnings.catch_warnings():  # a class absent from every case: NaN, left out of the means
        warnings.simplefilter("ignore", RuntimeWarning)
        per_dice, per_iou = np.nanmean(scores["dice"], 0), np.nanmean(scores["iou"], 0)
        out = {"dice": float(np.nanmean(per_dice[1:])), "miou": float(np.nanmean(per_iou))}
        out.update({f"dice_{name}": float(v) for name, v in zip(classes[1:], per_dice[1:])})
        out.update({f"iou_{name}": float(v) for name, v in zip(classes, per_iou)})
        if "hd95" in scores:
            out["hd95"] = float(np.nanmean(np.nanmean(scores["hd95"], 0)))
    return out


def mean_dice(dice: np.ndarray, items: np.ndarray) -> float:
    """``dice`` of the cases ``items`` (a bootstrap draw): the mean over foreground classes of their means."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(np.nanmean(dice[items], 0)[1:]))


def evaluate(model: nn.Module, cases: list[Case], plan: dict, classes: list[str], device: torch.device, *,
             overlap: float, mirror_axes: tuple[int, ...] = (), hd95: bool = False) -> dict[str, float]:
    """Per-class Dice and IoU on whole cases (mean over cases), ``dice`` and ``miou`` (see ``summarize``)."""
    return summarize(score_cases(model, cases, plan, classes, device, overlap=overlap, mirror_axes=mirror_axes,
                                 hd95=hd95), classes)


# =============================================================================================
# Masks in each input's own geometry and label values
# =============================================================================================

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


# =============================================================================================
# What a run saves for use: model.json (every fold's plan and fingerprint) and its test predictions
# =============================================================================================

def weights_name(fold: int) -> str:
    return "model.safetensors" if fold == 0 else f"model-fold{fold}.safetensors"


def save_card(run, cfg, data: SegData, models: list[dict], rows: list[dict], device: torch.device) -> None:
    """``model.json`` and ``predictions.csv`` (the test cases' masks are in ``predictions/``). ``models``: per fold
    ``{"weights", "plan", "fingerprint"}``; the card's preprocess and evaluation fields are fold 0's plan."""
    plan, fp = models[0]["plan"], models[0]["fingerprint"]
    state = "EMA" if cfg.ema_decay > 0 else "final"
    selected = (f"the {state} weights training ended with (one train/validation/test split)" if len(models) == 1 else
                f"{len(models)} fold models ({state} weights): each scored its own test fold; new data gets the mean "
                "of their softmax (predict fold=K: one fold's)")
    artifact.write_card(
        run.dir, recipe=run.spec.name if run.spec else "medical/unet", task="segmentation",
        weights=[m["weights"] for m in models], selected=selected, classes=data.classes,
        preprocess={"channels": fp["channels"], "spatial_dims": fp["spatial_dims"],
                    "label_values": list(data.values or range(len(data.classes))), "spacing": plan["spacing"],
                    "normalize": plan["normalize"], "intensity_fg": fp["intensity_fg"],
                    "slice_axis": plan["slice_axis"]},
        evaluation={"sliding_window": {"patch": plan["patch"], "batch": plan["batch_size"], "overlap": cfg.overlap,
                                       "mode": "gaussian"},
                    "tta": cfg.tta, "mirror_axes": plan["flip_axes"] if cfg.tta else [],
                    "precision": resolve_precision(device, cfg.precision),
                    "ensemble": "mean softmax of the fold models" if len(models) > 1 else "one model"},
        models=[{"fold": k, **m} for k, m in enumerate(models)], files=["plan.json"], dataset=data.name)
    artifact.write_predictions(run.dir, rows)


def load_models(cfg, run, device: torch.device, fold: int = -1) -> list[tuple[nn.Module, dict, dict]]:
    """(network, plan, fingerprint) of every fold, or of fold ``fold``; laid out as training laid them out."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    card = run.card
    entries = card["models"]
    if fold >= len(entries):
        raise ZooError(f"fold={fold}: the run saved {len(entries)} model(s) (folds 0..{len(entries) - 1})")
    out = []
    for entry in entries if fold < 0 else [entries[fold]]:
        plan, path = entry["plan"], run.path(entry["weights"])
        model = build_model(cfg.model, plan["dims"], card["preprocess"]["channels"], len(card["classes"]),
                            plan["width"], plan["levels"], cfg)
        try:
            load_model(model, str(path))
        except (RuntimeError, SafetensorError) as exc:
            raise ZooError(f"{path}: does not fit the run's network ({str(exc).splitlines()[0][:160]})") from None
        layout = torch.channels_last if cfg.channels_last and plan["dims"] == 2 else torch.contiguous_format
        out.append((model.to(device).to(memory_format=layout).eval(), plan, entry["fingerprint"]))
    return out


def settings(card: dict, opts) -> tuple[float, bool]:
    """(overlap, tta): the run's evaluation unless the options say otherwise."""
    ev = card["evaluation"]
    if opts.overlap != -1 and not 0 <= opts.overlap < 1:
        raise ZooError(f"overlap={opts.overlap}: use -1 (the run's) or a fraction in [0, 1)")
    overlap = ev["sliding_window"]["overlap"] if opts.overlap == -1 else opts.overlap
    return overlap, bool(ev["tta"]) if opts.tta == -1 else bool(opts.tta)


def _window(plan: dict, opts, tta: bool) -> tuple[dict, tuple[int, ...]]:
    """The plan with the predict batch, and the mirrored axes."""
    return {**plan, "batch_size": opts.batch_size or plan["batch_size"]}, tuple(plan["flip_axes"]) if tta else ()


# =============================================================================================
# zoo predict: the run's own test cases, or new images and volumes
# =============================================================================================

def predict_test(cfg, opts, run) -> artifact.Predictions:
    """The run's own split rebuilt from its config; each fold's test cases through that fold's model, scored as
    the run scored them (its plan's grid, sliding windows, mirrored views): the run's test metrics again."""
    from recipe_zoo.core.metrics import bootstrap, summarize_folds

    card, device = run.card, choose_device(run.device)
    classes, values = card["classes"], card["preprocess"]["label_values"]
    data = load_data(cfg, run)
    folds = split_cases(data, cfg.folds, cfg.val_fraction, cfg.test_fraction)
    if len(folds) != len(card["models"]):
        raise ZooError(f"data={cfg.data}: now splits into {len(folds)} fold(s), and the run saved "
                       f"{len(card['models'])} model(s); has the data changed since?")
    overlap, tta = settings(card, opts)
    total = sum(len(f.test) for f in folds)
    per_fold, pooled, rows, masks, files = [], [], [], [], []
    for k, fold in enumerate(folds):
        ((model, plan, fp),) = load_models(cfg, run, device, k)
        window, mirror = _window(plan, opts, tta)
        done = len(rows)
        writer = MaskWriter(run.files_dir, values, fold.test, keep=True,
                            progress=lambda n: run.progress(done + n, total, "test cases"))
        with torch.no_grad(), autocast(device, resolve_precision(device, cfg.precision)):
            scores = score_cases(model, [preprocess(c, plan, fp) for c in fold.test], window, classes, device,
                                 overlap=overlap, mirror_axes=mirror, hd95=cfg.hd95, each=writer)
        per_fold.append({f"test_{m}": v for m, v in summarize(scores, classes).items()})
        pooled.append(scores["dice"])
        rows += writer.rows(scores["dice"], classes, k if len(folds) > 1 else None)
        masks += writer.masks
        files += writer.files
    metrics = summarize_folds(per_fold, lambda line: None)
    dice = np.concatenate(pooled)
    low, high = bootstrap(functools.partial(mean_dice, dice), len(dice))
    return artifact.Predictions(rows=rows, metrics={**metrics, "test_dice_ci_low": low, "test_dice_ci_high": high},
                                files=files, arrays={"masks": masks})


def _is_image(path: Path) -> bool:
    return path.name.lower().endswith(IMAGE_SUFFIXES)


def _match_key(path: Path) -> str:
    """Images and masks pair by stem; an nnU-Net channel suffix (``case_0000``) is not part of it."""
    stem = _stem(path)
    return stem[:-5] if len(stem) > 5 and stem[-5] == "_" and stem[-4:].isdigit() else stem


def list_inputs(data: str, labels: str, log) -> tuple[list[tuple[Path, Path | None]], Path]:
    """(image, mask or None) pairs and the folder names are relative to: one file, a folder of images (read
    recursively), or a folder with images/ (or imagesTr/) whose masks/ (or labels/, labelsTr/) give Dice;
    ``labels``: a mask file, or a folder of masks matched by name."""
    root = Path(data)
    if not root.exists():
        raise ZooError(f"data={data}: no such file or folder")
    if labels and not Path(labels).exists():
        raise ZooError(f"labels={labels}: no such file or folder")
    if root.is_file():
        if not _is_image(root):
            raise ZooError(f"{root}: not an image or volume ({', '.join(IMAGE_SUFFIXES)})")
        if labels and Path(labels).is_file():
            return [(root, Path(labels))], root.parent
        files, base, mask_dir = [root], root.parent, Path(labels) if labels else None
    else:
        image_dir = next((root / d for d in IMAGE_DIRS if (root / d).is_dir()), None)
        base = image_dir or root
        found = sorted(p for p in base.rglob("*") if p.is_file())
        files = [p for p in found if _is_image(p)]
        if len(files) < len(found):
            log(f"{base}: skipped {len(found) - len(files)} files that are not images or volumes")
        if not files:
            raise ZooError(f"{base}: no images or volumes ({', '.join(IMAGE_SUFFIXES)}) found")
        mask_dir = (Path(labels) if labels else
                    next((root / d for d in MASK_DIRS if (root / d).is_dir()), None) if image_dir else None)
    if mask_dir is None:
        return [(f, None) for f in files], base
    if not mask_dir.is_dir():
        raise ZooError(f"labels={labels}: one mask file is for one image; for a folder of images give a folder")
    masks: dict[str, Path] = {}
    for p in sorted(mask_dir.rglob("*")):
        if p.is_file() and _is_image(p):
            masks.setdefault(_match_key(p), p)
    lonely = [f for f in files if _match_key(f) not in masks]
    if lonely:
        raise ZooError(f"{lonely[0]}: no mask named like it in {mask_dir} ({len(lonely)} of {len(files)} images "
                       "have none)")
    return [(f, masks[_match_key(f)]) for f in files], base


def read_case(path: Path, mask: Path | None, card: dict, root: Path) -> RawCase:
    """One input, checked against what the model was trained on (spatial dims, channels), with its mask mapped
    to class indices through the run's label values."""
    pre = card["preprocess"]
    image, spacing = read_image(path)
    dims, channels = pre["spatial_dims"], pre["channels"]
    if image.ndim - 1 != dims:
        kind = {2: "images", 3: "volumes"}
        raise ZooError(f"{path}: {image.ndim - 1}-D input of shape {tuple(image.shape[1:])}, but the model was "
                       f"trained on {dims}-D {kind.get(dims, 'inputs')}")
    if image.shape[0] != channels:
        raise ZooError(f"{path}: {image.shape[0]} channel(s), but the model was trained on {channels}")
    bad = int((~np.isfinite(image)).sum())
    if bad:
        raise ZooError(f"{path}: {bad} voxels are NaN or infinite")
    if mask is None:
        label = np.zeros((1, *image.shape[1:]), np.uint8)
    else:
        found, _ = read_image(mask)
        (label,), _ = map_labels([check_label(found, mask, image.shape, path)], pre["label_values"], [mask])
    return RawCase(_stem(path), image, label, spacing, str(path), _relative(path, root))


def predict_new(cfg, opts, run) -> artifact.Predictions:
    """Masks for new images or volumes: every fold model's softmax (on its own plan's grid, back on the input's)
    averaged, or fold ``opts.fold``'s; Dice per case, and the metrics, when masks are given."""
    card, device = run.card, choose_device(run.device)
    classes = card["classes"]
    pairs, root = list_inputs(opts.data, opts.labels, run.log)
    models = load_models(cfg, run, device, opts.fold)
    overlap, tta = settings(card, opts)
    labelled = pairs[0][1] is not None
    scores = CaseScores(len(classes), cfg.hd95)
    writer = MaskWriter(run.files_dir, card["preprocess"]["label_values"], keep=True,
                        progress=lambda n: run.progress(n, len(pairs), "cases"))
    for path, mask_path in pairs:
        raw = read_case(path, mask_path, card, root)
        probs = 0
        with torch.no_grad(), autocast(device, resolve_precision(device, cfg.precision)):
            for model, plan, fp in models:
                window, mirror = _window(plan, opts, tta)
                out = predict(model, preprocess(raw, plan, fp), window, overlap, mirror, device).float().cpu()
                probs = probs + in_geometry(out, raw.image.shape[1:])
        mask = writer.add(raw, probs / len(models))
        if labelled:
            scores.add(torch.from_numpy(mask).long(), torch.from_numpy(raw.label[0]), raw.spacing)
    result = scores.result() if labelled else None
    metrics = {f"test_{m}": v for m, v in summarize(result, classes).items()} if labelled else {}
    return artifact.Predictions(rows=writer.rows(result["dice"] if labelled else None, classes), metrics=metrics,
                                files=writer.files, arrays={"masks": writer.masks})
