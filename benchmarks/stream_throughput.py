"""Reading speed of streamed images: a folder decoded with 0, 1, 2 (...) worker processes, against a prepared array
and the same images held in memory. Batches come from ``TensorBatches`` exactly as vision/resnet draws them (order,
workers, prefetch), with no model, so the figure is the data path's ceiling.

    ZOO_DATA=../shared/data python benchmarks/stream_throughput.py [--data cifar10-subset] [--batches 60]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.data import locate, prepare_run
from recipe_zoo.recipes import images
from recipe_zoo.recipes.vision.data import prepare_images


def images_per_s(x, y, batch: int, batches: int, workers: int, repeats: int = 3) -> float:
    rates = []
    for r in range(repeats):
        b = TensorBatches((x, y), batch, seed=r, workers=workers)
        b.next_batch()  # worker start-up is not reading
        t0 = time.perf_counter()
        for _ in range(batches):
            b.next_batch()
        rates.append(batch * batches / (time.perf_counter() - t0))
        b.prefetch = None
    return statistics.median(rates)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="cifar10-subset")
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", default="0,1,2")
    args = p.parse_args(argv)
    run = prepare_run(log=lambda m: print(m, file=sys.stderr))
    root = locate(args.data) if args.data in ("cifar10-subset",) else Path(args.data)
    streamed = images.load_folder_splits(root, None, 0.1, 0.2, run.log, stream=True)
    memory = images.load_folder_splits(root, None, 0.1, 0.2, run.log)
    print(f"{args.data}: {len(streamed.train_y)} training images of {tuple(streamed.train_x.shape[1:])}; "
          f"batch {args.batch}, {args.batches} batches, median of 3; torch threads {torch.get_num_threads()}")
    for w in (int(v) for v in args.workers.split(",")):
        rate = images_per_s(streamed.train_x, streamed.train_y, args.batch, args.batches, w)
        print(f"folder, decoded as read, workers={w}: {rate:,.0f} images/s")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = type("Cfg", (), {"data": str(root), "image_size": 0, "val_fraction": 0.1, "test_fraction": 0.2,
                               "workers": 0})()
        folder = prepare_images(cfg, run, out=Path(tmp) / "p")
        arrays = images.load_image_splits(str(folder), 0, 0.1, 0.2, run)
        for w in (0, 1):
            rate = images_per_s(arrays.train_x, arrays.train_y, args.batch, args.batches, w)
            print(f"prepared array (pread), workers={w}: {rate:,.0f} images/s")
    rate = images_per_s(memory.train_x, memory.train_y, args.batch, args.batches, 0)
    print(f"in memory: {rate:,.0f} images/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
