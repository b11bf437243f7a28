"""The two ends of the fid_zoo scale on a diffusion benchmark, for the closing note and the board.

    ZOO_DATA=../shared/data python benchmarks/diffusion_reference.py --data mnist --width 8 --seeds 3

- floor: as many training images as the recipes generate (1,000) against the 1,000 held-out images:
  what a perfect generator would score at these sample sizes;
- ceiling: the same U-Net untrained (random weights, seed N), sampled with each recipe's default
  sampler (ddpm: DDIM 50 steps; flow: Heun 25 steps).
Uses the recipes' own loaders, feature network, samplers and FID. Prints one JSON line per figure.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
from recipe_zoo.data import locate
from recipe_zoo.recipes.diffusion import data as dif_data
from recipe_zoo.recipes.diffusion import ddpm, models


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="mnist", choices=["mnist", "digits"])
    parser.add_argument("--width", type=int, default=8, help="the U-Net width the recipes chose")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000, help="generated images (the recipes' n_samples)")
    args = parser.parse_args()
    if args.data == "mnist":
        data = dif_data.load_mnist_generative(locate("mnist"))
    else:
        from recipe_zoo.recipes.images import load_digits_splits

        data = load_digits_splits()
    net, acc = models.feature_net(data, print)
    real = net.embed(dif_data.to_model_range(data.test_x[:1000]))
    floors = []
    for seed in range(args.seeds):
        idx = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(seed))[:args.n]
        floors.append(ddpm.fid(net.embed(dif_data.to_model_range(data.train_x[idx])), real))
    print(json.dumps({"figure": "floor", "data": args.data, "fid_zoo": floors, "n": [args.n, len(real)],
                      "feature_net_accuracy": acc}))
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
                          "fid_zoo": values, "mean": statistics.fmean(values)}))


if __name__ == "__main__":
    main()
