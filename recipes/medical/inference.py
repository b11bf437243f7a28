"""A trained medical segmenter in use: what a run saves (``model.json`` with every fold's plan and fingerprint,
``predictions.csv`` and its test masks), its fold models loaded back, and ``zoo predict``: new images or volumes,
or the run's own test cases scored again. Scoring is ``evaluation.py``'s, the masks ``masks.py``'s.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from recipe_zoo.core import artifact, items
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision
from recipe_zoo.recipes.medical.data import (IMAGE_DIRS, IMAGE_SUFFIXES, MASK_DIRS, RawCase, SegData, _relative, _stem,
                                             check_label, load_data, map_labels, read_image)
from recipe_zoo.recipes.medical.evaluation import CaseScores, dice_items, predict, score_cases, summarize
from recipe_zoo.recipes.medical.masks import MaskWriter, in_geometry
from recipe_zoo.recipes.medical.models import Network, build_model
from recipe_zoo.recipes.medical.preprocess import preprocess
from recipe_zoo.recipes.medical.split import split_cases

# =============================================================================================
# What a run saves for use: model.json (every fold's plan and fingerprint) and its test predictions
# =============================================================================================

def weights_name(fold: int) -> str:
    return "model.safetensors" if fold == 0 else f"model-fold{fold}.safetensors"


def save_card(run, cfg, data: SegData, models: list[dict], rows: list[dict], device: torch.device,
              source: dict | None = None) -> None:
    """``model.json`` and ``predictions.csv`` (the test cases' masks are in ``predictions/``). ``models``: per fold
    ``{"weights", "plan", "fingerprint"}``; the card's preprocess and evaluation fields are fold 0's plan."""
    plan, fp = models[0]["plan"], models[0]["fingerprint"]
    state = "EMA" if cfg.ema_decay > 0 else "final"
    selected = (f"the {state} weights training ended with (one train/validation/test split)" if len(models) == 1 else
                f"{len(models)} fold models ({state} weights): each scored its own test fold; new data gets the mean "
                "of their softmax (predict fold=K: one fold's)")
    artifact.write_card(
        run.dir, recipe=artifact.recipe_name(run, "medical/unet"), task="segmentation",
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
        models=[{"fold": k, **m} for k, m in enumerate(models)], files=["plan.json"], dataset=data.name,
        **({"source": source} if source else {}))
    artifact.write_predictions(run.dir, rows)


def load_models(net: Network, run, device: torch.device, fold: int = -1) -> list[tuple[nn.Module, dict, dict]]:
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
        model = build_model(net, plan["dims"], card["preprocess"]["channels"], len(card["classes"]), plan["width"],
                            plan["levels"])
        try:
            load_model(model, str(path))
        except (RuntimeError, SafetensorError) as exc:
            raise ZooError(f"{path}: does not fit the run's network ({str(exc).splitlines()[0][:160]})") from None
        out.append((model.to(device).to(memory_format=net.layout(plan["dims"])).eval(), plan, entry["fingerprint"]))
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

def predict_test(cfg, opts, run, net: Network) -> artifact.Predictions:
    """The run's own split rebuilt from its config; each fold's test cases through that fold's model (``net``),
    scored as the run scored them (its plan's grid, sliding windows, mirrored views): the run's test metrics again."""
    from recipe_zoo.core.metrics import summarize_folds

    card, device = run.card, choose_device(run.device)
    classes, values = card["classes"], card["preprocess"]["label_values"]
    data = load_data(cfg.data, cfg.label_values)
    folds = split_cases(data, cfg.folds, cfg.val_fraction, cfg.test_fraction, cfg.train_cases)
    if len(folds) != len(card["models"]):
        raise ZooError(f"data={cfg.data}: now splits into {len(folds)} fold(s), and the run saved "
                       f"{len(card['models'])} model(s); has the data changed since?")
    overlap, tta = settings(card, opts)
    total = sum(len(f.test) for f in folds)
    per_fold, pooled, rows, masks, files = [], [], [], [], []
    for k, fold in enumerate(folds):
        ((model, plan, fp),) = load_models(net, run, device, k)
        window, mirror = _window(plan, opts, tta)
        done = len(rows)
        writer = MaskWriter(run.files_dir, values, fold.test, keep=True,
                            progress=lambda n: run.progress(done + n, total, "test cases"))
        with torch.no_grad(), autocast(device, resolve_precision(device, cfg.precision)):
            scores = score_cases(model, [preprocess(c, plan, fp) for c in fold.test], window, classes, device,
                                 overlap=overlap, mirror_axes=mirror, hd95=cfg.hd95, each=writer, natives=fold.test)
        per_fold.append({f"test_{m}": v for m, v in summarize(scores, classes).items()})
        pooled.append(scores["dice"])
        rows += writer.rows(scores["dice"], classes, k if len(folds) > 1 else None)
        masks += writer.masks
        files += writer.files
    metrics = summarize_folds(per_fold, lambda line: None)
    dice = np.concatenate(pooled)
    low, high = items.test_interval(dice_items(dice))
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


def predict_new(cfg, opts, run, net: Network) -> artifact.Predictions:
    """Masks for new images or volumes: every fold model's softmax (on its own plan's grid, back on the input's)
    averaged, or fold ``opts.fold``'s; Dice per case, and the metrics, when masks are given."""
    card, device = run.card, choose_device(run.device)
    classes = card["classes"]
    pairs, root = list_inputs(opts.data, opts.labels, run.log)
    models = load_models(net, run, device, opts.fold)
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
    metrics = dict(summarize(result, classes)) if labelled else {}  # new data's scores: plain names, not test_
    return artifact.Predictions(rows=writer.rows(result["dice"] if labelled else None, classes), metrics=metrics,
                                files=writer.files, arrays={"masks": writer.masks})
