"""Evaluating a medical segmenter, as training and ``zoo predict`` both score cases: sliding windows over whole
images (a 2-D network's over a volume's slices), mirrored test-time views, and MONAI's Dice, IoU and HD95 per case
and class, summarised as the run reports them.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import items
from recipe_zoo.recipes.medical.data import RawCase
from recipe_zoo.recipes.medical.masks import in_geometry
from recipe_zoo.recipes.medical.preprocess import Case


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
                each=None, natives: list[RawCase] | None = None) -> dict[str, np.ndarray]:
    """Per case and class, (n_cases, K): ``dice`` and ``iou`` (NaN for a class absent from the truth), and
    ``hd95`` (foreground classes only) when asked. ``each(i, probs)`` sees every case's probabilities.
    ``natives``: the same cases as read; each prediction is then brought back to its case's own grid and scored
    against the label as read, at the case's spacing: the test's scores do not move with the plan's ``spacing``
    (without it, on the plan's grid, as validation is read during training)."""
    scores = CaseScores(len(classes), hd95)
    for i, case in enumerate(cases):
        probs = predict(model, case, plan, overlap, mirror_axes, device).cpu()
        if natives is None:
            scores.add(probs.argmax(0), case.label[0], plan["spacing"])
        else:
            raw = natives[i]
            scores.add(in_geometry(probs, raw.label.shape[1:]).argmax(0), torch.from_numpy(raw.label[0]),
                       raw.spacing)
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


def dice_items(dice: np.ndarray) -> items.ItemScores:
    """Each test case's Dice per class (NaN where a class is absent): the metric is the mean over foreground classes
    of their means over the cases."""
    return items.ItemScores("dice", {"dice": np.asarray(dice, np.float64)})


def evaluate(model: nn.Module, cases: list[Case], plan: dict, classes: list[str], device: torch.device, *,
             overlap: float, mirror_axes: tuple[int, ...] = (), hd95: bool = False) -> dict[str, float]:
    """Per-class Dice and IoU on whole cases (mean over cases), ``dice`` and ``miou`` (see ``summarize``)."""
    return summarize(score_cases(model, cases, plan, classes, device, overlap=overlap, mirror_axes=mirror_axes,
                                 hd95=hd95), classes)
