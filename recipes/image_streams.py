"""Images read from disk as they are used (``stream=true``), and prepared image arrays (``zoo data prepare``).

A streamed folder is decoded a batch at a time (in worker processes while the model trains), exactly as the
in-memory path decodes it, so the same files give the same pixels; memory holds the batches in flight, not the
dataset. ``zoo data prepare vision/resnet data=FOLDER`` decodes every image once, at the run's size, into one
uint8 array per part (``train_x.npy`` ...: plain ``.npy`` files, ``numpy.load(..., mmap_mode="r")`` reads them
too) with the labels and the split's keys, so later runs read rows instead of decoding files (the ``prepare`` hook
that makes them is ``images.prepare_images``: it loads what it writes through the image dispatcher).
"""
from __future__ import annotations

import json
import os
import types
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core import prepared, streams
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.progress import Progress
from recipe_zoo.core.splits import readable_key
from recipe_zoo.recipes.image_decoding import decode_image, is_grey
from recipe_zoo.recipes.image_splits import ImageSplits

# fixed when the arrays are written
PREPARED_FIELDS = ("image_size", "val_fraction", "test_fraction", "labels", "file_column", "label_column")
STATS_SAMPLE = 10_000  # input statistics over this many training images, evenly spaced (all when fewer)
DOCTOR_SAMPLE = 2_000  # zoo doctor's data checks on a streamed part read this many images


def default_workers(requested: int) -> int:
    """-1: two processes per 2 cores, up to 4 (decoding is the work; the model trains in this process)."""
    return requested if requested >= 0 else min(4, max(1, (os.cpu_count() or 1)))


def folder_images(paths: list[Path], size: int | None, root: Path, log=print):
    """The files as a lazy (N, C, H, W) uint8 array, decoded when read (``image_decoding.decode_image``): one channel
    when every file is grey (read from the headers), else grey files repeated to RGB, as the in-memory path does."""
    from PIL import Image, UnidentifiedImageError

    grey, first = 0, None
    progress = Progress(len(paths), f"{root}: reading headers", log, "images")
    for path in paths:
        try:
            with Image.open(path) as im:  # the header only
                grey += is_grey(im.mode)
                first = first or im.size
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            raise ZooError(f"{path}: cannot decode image ({exc})") from None
        progress.update()
    progress.done()
    channels = 1 if grey == len(paths) else 3
    if 0 < grey < len(paths):
        log(f"{root}: {grey} greyscale of {len(paths)} images converted to RGB (the others are colour)")
    h, w = (size, size) if size else (first[1], first[0])

    def read(idx: np.ndarray) -> torch.Tensor:
        out = torch.empty((len(idx), channels, h, w), dtype=torch.uint8)
        for k, i in enumerate(idx.tolist()):
            im = decode_image(paths[i], size)
            if tuple(im.shape[:2]) != (h, w):
                raise ZooError(f"{paths[i]}: {im.shape[0]}x{im.shape[1]} px, and the folder's images are {h}x{w}; "
                               "set image_size=N to resize")
            out[k] = im.expand(-1, -1, channels).permute(2, 0, 1)
        return out

    return streams.LazyItems(len(paths), read, (channels, h, w), torch.uint8)


def resized(x, size: int):
    """uint8 images resized to size x size (antialiased bilinear), now for a tensor, as read for a lazy array."""
    import torch.nn.functional as F

    def resize(t: torch.Tensor) -> torch.Tensor:
        return F.interpolate(t.float(), size=(size, size), mode="bilinear", antialias=True).round().clamp(0, 255).byte()

    return streams.mapped(x, resize, (x.shape[1], size, size))


def sample_index(n: int, k: int = STATS_SAMPLE) -> torch.Tensor:
    """Up to ``k`` of ``n`` items, evenly spaced (all of them, in order, when there are fewer)."""
    return torch.linspace(0, n - 1, min(n, k)).round().long()


def channel_stats(x) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and standard deviation of uint8 images in [0, 1], over ``sample_index`` of them, summed in
    float64 a chunk at a time (the pixels of 256 images of 32 px): the same numbers in memory or streamed, and
    memory for one chunk only."""
    idx, chunk = sample_index(len(x)), max(1, 256 * 32 * 32 // (x.shape[-1] * x.shape[-2]))
    total = squares = torch.zeros(x.shape[1], dtype=torch.float64)
    for i in range(0, len(idx), chunk):
        b = x[idx[i:i + chunk]].double() / 255
        total, squares = total + b.sum(dim=(0, 2, 3)), squares + (b * b).sum(dim=(0, 2, 3))
    n = len(idx) * x.shape[2] * x.shape[3]
    mean = total / n
    var = (squares - n * mean * mean) / max(n - 1, 1)
    return mean.float(), var.clamp(min=0).sqrt().float()


def stats_sample(x, y: torch.Tensor):
    """What zoo doctor reads of a part: all of it in memory; of a streamed part ``DOCTOR_SAMPLE`` images of it."""
    if isinstance(x, torch.Tensor):
        return x, y
    idx = sample_index(len(x), DOCTOR_SAMPLE)
    return x[idx], y[idx]


# =============================================================================================
# Prepared image arrays
# =============================================================================================

PART_ARRAYS = (("train", "train_x", "train_y"), ("validation", "val_x", "val_y"), ("test", "test_x", "test_y"))


def write_prepared(data: ImageSplits, folder: Path, workers: int, start_progress=None) -> dict:
    """``data``'s parts as the arrays of a prepared folder (read ahead by ``workers`` processes), its keys beside
    them; returns the manifest's fields. ``start_progress(total, what, unit)``: a progress line, when given."""
    total = sum(len(getattr(data, x)) for _, x, _ in PART_ARRAYS)
    progress = start_progress(total, "decoding", "images") if start_progress is not None else None
    files = []
    for part, x_name, y_name in PART_ARRAYS:
        x = getattr(data, x_name)
        with streams.NpyWriter(folder / f"{x_name}.npy", np.uint8, x.shape[1:]) as writer:
            for chunk in streams.chunks(x, 256, workers):
                writer.append(chunk.numpy())
                if progress is not None:
                    progress.update(len(chunk))
        np.save(folder / f"{y_name}.npy", getattr(data, y_name).numpy().astype(np.int64))
        files += [f"{x_name}.npy", f"{y_name}.npy"]
    if progress is not None:
        progress.done()
    (folder / "keys.json").write_text(json.dumps({k: [readable_key(v) for v in keys] for k, keys in data.keys.items()}))
    return {"files": [*files, "keys.json"], "classes": data.classes, "name": data.name, "how": data.how,
            "image_shape": list(data.train_x.shape[1:]),
            "sizes": {part: len(getattr(data, y)) for part, _, y in PART_ARRAYS}}


def open_prepared(folder: Path, settings: dict, log=print) -> ImageSplits:
    """A prepared folder as ``ImageSplits`` of arrays read as they are used; the run must ask for the settings the
    arrays were made with (one line otherwise)."""
    manifest = prepared.read(folder, "images")
    prepared.check(manifest, types.SimpleNamespace(**settings), folder)
    arrays = {name: streams.NpyArray(folder / f"{name}.npy") for _, x, y in PART_ARRAYS for name in (x, y)}
    labels = {name: arrays[name][0:len(arrays[name])] for _, _, name in PART_ARRAYS}  # small: held in memory
    keys = json.loads((folder / "keys.json").read_text())
    out = ImageSplits(arrays["train_x"], labels["train_y"], arrays["val_x"], labels["val_y"], arrays["test_x"],
                      labels["test_y"], manifest["classes"], manifest["name"], keys=keys, how=manifest["how"])
    log(f"{folder}: prepared {manifest['source']}: {out.sizes()} images of {tuple(manifest['image_shape'])}")
    return out
