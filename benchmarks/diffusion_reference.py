"""The two ends of the fid_zoo scale on a diffusion benchmark, for the closing note and the board.

    ZOO_DATA=../shared/data python benchmarks/diffusion_reference.py --data mnist --width 8 --seeds 3

- floor: as many training images as the recipes generate (1,000) against the recipes' test images (about
  1,000 of mnist's 10,000, hash-chosen): what a perfect generator would score at these sample sizes;
- ceiling: the same U-Net untrained (random weights, seed N), sampled with each recipe's default
  sampler (ddpm: DDIM 50 steps; flow: Heun 25 steps), against the same test images.
Uses the recipes' own loaders and split, feature network, samplers and FID (as many real images as a run's
test FID). Prints one JSON line per figure.
"""
from __future__ import annotations

import argparse
import json
import statistics
from types import SimpleNamespace

import torch
from recipe_zoo.recipes.diffusion import data as dif_data
from recipe_zoo.recipes.diffusion import ddpm, models


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="mnist", choices=["mnist", "digits"])
    parser.add_argument("--width", type=int, default=8, help="the U-Net width the recipes chose")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000, help="generated images (the recipes' n_samples)")
    args = parser.parse_args()
    recipe_cfg = ddpm.DiffusionConfig(data=args.data)
    data = dif_data.load_data(recipe_cfg, SimpleNamespace(log=print, report=lambda *a: None))  # the recipes' split
    n_real = min(recipe_cfg.n_real, len(data.val_y), len(data.test_y))
    net, acc = models.feature_net(data, print)
    real = net.embed(dif_data.to_model_range(data.test_x[:n_real]))
    floors = []
    for seed in range(args.seeds):
        idx = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(seed))[:args.n]
        floors.append(ddpm.fid(net.embed(dif_data.to_model_range(data.train_x[idx])), real))
    print(json.dumps({"figure": "floor", "data": args.data, "split": data.how, "test_fid_zoo": floors,
                      "n": [args.n, len(real)], "feature_net_val_accuracy": acc}))
    shape = tuple(data.train_x.shape[1:])
    for method in ("ddpm", "flow"):
        cfg = ddpm.DiffusionConfig(method=method, width=args.width)
        values = []
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            model = models.build_unet(cfg, args.width, shape[0], shape[-1], len(data.classes)).eval()
            images = ddpm.sample(model, cfg, args.n, shape, None, len(data.classes), torch.device("cpu"), seed)
            values.append(ddpm.fid(net.embed(images), real))
        sampler, steps = ddpm.resolve_sampler(cfg)
        print(json.dumps({"figure": "ceiling", "method": method, "width": args.width, "sampler": f"{sampler} {steps}",
                          "test_fid_zoo": values, "mean": statistics.fmean(values)}))


if __name__ == "__main__":
    main()
