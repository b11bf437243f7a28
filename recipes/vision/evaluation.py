"""Vision's evaluation: test-time views (mirror, one-pixel shifts), the scores of a set of logits, and the test split
scored once after training. Streamed images are read ahead in worker processes as they are scored.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import items, metrics, streams
from recipe_zoo.core.precision import autocast, resolve_precision
from recipe_zoo.recipes.image_splits import ImageSplits
from recipe_zoo.recipes.vision.data import prediction_rows, test_names


def _mirror(model: nn.Module, x: torch.Tensor, flip: bool) -> torch.Tensor:
    return 0.5 * (model(x).float() + model(x.flip(-1)).float()) if flip else model(x).float()


def predict(model: nn.Module, x_uint8: torch.Tensor, normalize, tta: int, flip: bool, batch: int = 0,
            progress=None, workers: int = 0):
    """Logits averaged over test-time views: 1 adds the mirror image (when training flips), 2 also
    the image shifted by one pixel both ways (half the weight on the centred views). ``x_uint8``: a tensor or a
    lazy array (``core.streams``), whose chunks ``workers`` processes read ahead. ``batch`` 0: 1024 images of
    32 px, fewer of larger ones (the same pixels per batch)."""
    batch = batch or max(16, 1024 * 32 * 32 // (x_uint8.shape[-1] * x_uint8.shape[-2]))
    logits, done = [], 0
    for chunk in streams.chunks(x_uint8, batch, workers):
        x = normalize(chunk)
        out = _mirror(model, x, flip and tta >= 1)
        if tta >= 2:
            h, w = x.shape[-2:]
            layout = torch.channels_last if x.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format
            padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
            shifted = (padded[..., :h, :w].contiguous(memory_format=layout),
                       padded[..., 2:, 2:].contiguous(memory_format=layout))
            out = 0.5 * out + 0.25 * sum(_mirror(model, v, flip) for v in shifted)
        logits.append(out)
        done += len(x)
        if progress is not None:
            progress(done)
    return torch.cat(logits)


def scores(logits: torch.Tensor, y: torch.Tensor, num_classes: int, prefix: str = "val_") -> dict:
    """Accuracy, macro-F1 and loss of the logits, named ``prefix + metric``; on test (``prefix="test_"``) also the
    accuracy's 95% bootstrap interval over the images."""
    y = y.to(logits.device)
    out = {f"{prefix}accuracy": metrics.accuracy(logits, y),
           f"{prefix}macro_f1": metrics.macro_f1(logits, y, num_classes),
           f"{prefix}loss": F.cross_entropy(logits.float(), y).item()}
    if prefix == "test_":
        low, high = items.test_interval(items.mean_of((logits.argmax(1) == y).cpu().numpy()))
        out |= {"test_accuracy_ci_low": low, "test_accuracy_ci_high": high}
    return out


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, normalize, tta: int, flip: bool,
             num_classes: int, prefix: str = "val_", workers: int = 0) -> dict:
    """``scores`` of the TTA logits."""
    return scores(predict(model, x, normalize, tta, flip, workers=workers), y, num_classes, prefix)


@torch.no_grad()
def score_test(model: nn.Module, data: ImageSplits, normalize, cfg, device,
               workers: int = 0) -> tuple[dict, list]:
    """The test set, scored once after training on the model training ended with (as ``fit`` evaluates:
    eval mode, the run's precision, the same TTA); also its rows for ``predictions.csv``."""
    model.eval()
    with autocast(device, resolve_precision(device, cfg.precision)):
        logits = predict(model, data.test_x, normalize, cfg.tta, cfg.flip == "on", workers=workers)
        test = scores(logits, data.test_y, len(data.classes), prefix="test_")
    return test, prediction_rows(logits, test_names(data), data.classes, data.test_y)
