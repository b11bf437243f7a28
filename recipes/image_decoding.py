"""Image files to pixels, for the image domains (vision, contrastive, diffusion): which files are images, one file
decoded to a uint8 (H, W, C) tensor (greyscale kept as one channel, the centre square resized), many stacked to
(N, C, H, W), and the size an own folder is read at when none is given.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.progress import Progress

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm"}
GREY_MODES = ("1", "L", "LA", "La", "I", "F")  # Pillow modes read as one channel (and I;16*)


def is_grey(mode: str) -> bool:
    """Whether a Pillow mode is read as one channel: 1-bit, 8-bit with or without alpha, 16- and 32-bit."""
    return mode in GREY_MODES or mode.startswith("I;16")


def decode_image(path: Path, size: int | None) -> torch.Tensor:
    """One image file as (H, W, C) uint8: one channel for a greyscale file, else RGB. With a size: its centre square
    resized to size x size (Pillow's bilinear, antialiased when shrinking), so the aspect ratio is kept."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("L" if is_grey(im.mode) else "RGB")
            if size and im.size != (size, size):
                w, h, s = *im.size, min(im.size)  # the centre square, s x s
                im = im.resize((size, size), Image.BILINEAR, box=((w - s) / 2, (h - s) / 2, (w + s) / 2, (h + s) / 2))
            return torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(im.size[1], im.size[0], -1)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ZooError(f"{path}: cannot decode image ({exc})") from None
    except Image.DecompressionBombError as exc:  # Pillow's guard against huge images (not an OSError)
        raise ZooError(f"{path}: {exc}; downscale it first") from None


def decode_images(paths: list[Path], size: int | None, root: Path, log=print) -> torch.Tensor:
    """The files as (N, C, H, W) uint8 at ``size`` (``decode_image``): one channel when all are grey, else RGB."""
    progress = Progress(len(paths), f"{root}: decoding", log, "images")
    images = []
    for p in paths:
        images.append(decode_image(p, size))
        progress.update()
    progress.done()
    shapes = {tuple(im.shape[:2]) for im in images}
    if len(shapes) > 1:
        raise ZooError(f"{root}: images have different sizes {sorted(shapes)[:3]}...; set image_size=N to resize")
    grey = sum(im.shape[-1] == 1 for im in images)
    if 0 < grey < len(images):
        log(f"{root}: {grey} greyscale of {len(images)} images converted to RGB (the others are colour)")
        images = [im.expand(-1, -1, 3) for im in images]  # grey repeated to three channels, as PIL converts it
    return torch.stack(images).permute(0, 3, 1, 2).contiguous()


def own_image_size(paths: list[Path], log=print) -> int:
    """``image_size`` 0 on own images: the median short side of ``paths`` (the training part's file headers) rounded
    to 32, within [32, 224]: small images keep their detail, photos shrink to what a CPU trains on, halving evenly."""
    from PIL import Image, UnidentifiedImageError

    sides = []
    for path in paths:
        try:
            with Image.open(path) as im:  # the header only: no pixels decoded
                sides.append(min(im.size))
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            raise ZooError(f"{path}: cannot decode image ({exc})") from None
        except Image.DecompressionBombError as exc:
            raise ZooError(f"{path}: {exc}; downscale it first") from None
    median = float(np.median(sides))
    size = min(max(int(median / 32 + 0.5) * 32, 32), 224)
    log(f"image size {size} px: the median short side {median:g} px rounded to 32, within [32, 224] "
        "(set image_size=N to choose)")
    return size
