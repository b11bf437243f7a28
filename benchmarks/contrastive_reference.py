"""Reference points for the contrastive recipes' frozen-feature scores, for the closing note and the board.

    ZOO_DATA=../shared/data python benchmarks/contrastive_reference.py --seeds 3
    ZOO_DATA=../shared/data python benchmarks/contrastive_reference.py --seeds 0 --runs RUN_DIR [RUN_DIR ...]

- floor: the recipes' default backbone with random weights (seed N), evaluated exactly as a trained
  one is at the end of a run (kNN k=200 T=0.1 and the linear probe: the training images without validation
  as the bank, the recipes' test images as queries; the same split as the recipes');
- ``--runs``: backbones of finished ``vision/resnet`` runs (trained with labels), their classifier
  removed, evaluated the same way: what supervised training reaches in the same budget.
Uses the recipe's own loaders, backbone builder and evaluation. Prints one JSON line per figure.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import torch
from recipe_zoo.recipes import backbones, images
from recipe_zoo.recipes.contrastive import evaluation, models, simclr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="cifar10-subset", choices=["cifar10-subset", "digits"])
    parser.add_argument("--seeds", type=int, default=3, help="random-weight backbones to evaluate")
    parser.add_argument("--model", default="zoo-resnet")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--runs", nargs="*", default=[], help="vision/resnet run folders (model.safetensors)")
    args = parser.parse_args()
    cfg = simclr.ContrastiveConfig(data=args.data, model=args.model, width=args.width)
    splits = images.load_image_splits(cfg.data, cfg.image_size, cfg.val_fraction, cfg.test_fraction,
                                      SimpleNamespace(log=print))  # the recipes' split
    mean, std = (t.view(1, -1, 1, 1) for t in backbones.input_stats(splits.train_x))

    def normalize(x_uint8: torch.Tensor) -> torch.Tensor:
        return ((x_uint8.float() / 255 - mean) / std).contiguous(memory_format=torch.channels_last)

    channels, size = splits.train_x.shape[1], splits.train_x.shape[-1]
    values = []
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        backbone, _ = models.build_backbone(cfg, channels, size)
        if isinstance(backbone, backbones.ZooNet):
            backbone.init_whitening(normalize(splits.train_x[:5000]))
        values.append(evaluation.evaluate_features(backbone.to(memory_format=torch.channels_last), splits, normalize, cfg))
    if values:
        print(json.dumps({"figure": "floor: random weights", "data": args.data, "model": f"{args.model} w{args.width}",
                          **{k: [v[k] for v in values] for k in values[0]},
                          **{f"mean_{k}": statistics.fmean(v[k] for v in values) for k in values[0]}}))
    for run_dir in map(Path, args.runs):
        config = json.loads((run_dir / "config.json").read_text())
        config = config.get("config", config)
        run_cfg = dataclasses.replace(cfg, model=config["model"], width=int(config["width"]))
        backbone, _ = models.build_backbone(run_cfg, channels, size)
        backbones._load_own_weights(backbone, str(run_dir), run_cfg.model)
        result = evaluation.evaluate_features(backbone.to(memory_format=torch.channels_last), splits, normalize, cfg)
        summary = json.loads((run_dir / "summary.json").read_text())
        print(json.dumps({"figure": "supervised backbone", "run": str(run_dir), "recipe": summary.get("recipe"),
                          "model": f"{run_cfg.model} w{run_cfg.width}",
                          "supervised_test_accuracy": summary.get("metrics", {}).get("test_accuracy"), **result}))


if __name__ == "__main__":
    main()
