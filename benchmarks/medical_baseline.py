"""MONAI's own 2-D segmentation tutorial setting on ``isbi2012-membrane``, for the medical closing note.

    ZOO_DATA=../shared/data python benchmarks/medical_baseline.py --seconds 300 --seed 0

The configuration of MONAI's 2-D UNet tutorials, as the issue names it: intensities scaled to
[0, 1], random 128x128 crops (positive/negative label-balanced) with random flips, batch 8,
``UNet(spatial_dims=2, channels=(16, 32, 64, 128, 256), strides=(2, 2, 2, 2), num_res_units=2)``,
``DiceCELoss(to_onehot_y, softmax)``, Adam 1e-3, trained for a fixed number of wall-clock seconds
on slices 0-23. Then sliding-window inference (128x128 windows, overlap 0.25) on the whole
validation slices 24-29 and MONAI's Dice / mean IoU, with membrane (mask value 0) as class 1.
Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from recipe_zoo.data import locate


def load(root: Path, ids):
    from PIL import Image

    out = []
    for i in ids:
        image = np.asarray(Image.open(root / "image" / f"{i}.png"), dtype=np.float32)[None] / 255.0
        mask = np.asarray(Image.open(root / "label" / f"{i}.png"))
        out.append({"image": image, "label": (mask == 0).astype(np.float32)[None]})  # membrane = value 0
    return out


def main() -> None:
    from monai.inferers import sliding_window_inference
    from monai.losses import DiceCELoss
    from monai.metrics import DiceMetric, MeanIoU
    from monai.networks.nets import UNet
    from monai.transforms import Compose, RandCropByPosNegLabeld, RandFlipd

    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    root = locate("isbi2012-membrane")
    train, val = load(root, range(24)), load(root, range(24, 30))
    aug = Compose([RandCropByPosNegLabeld(["image", "label"], "label", (128, 128), pos=1, neg=1, num_samples=1),
                   RandFlipd(["image", "label"], prob=0.5, spatial_axis=0),
                   RandFlipd(["image", "label"], prob=0.5, spatial_axis=1)])
    aug.set_random_state(seed=args.seed)
    model = UNet(spatial_dims=2, in_channels=1, out_channels=2, channels=(16, 32, 64, 128, 256),
                 strides=(2, 2, 2, 2), num_res_units=2)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    rng = np.random.default_rng(args.seed)
    steps, spent = 0, 0.0
    while spent < args.seconds:
        t0 = time.perf_counter()
        cases = [aug(train[i])[0] for i in rng.integers(0, len(train), 8)]
        x = torch.stack([torch.as_tensor(c["image"]) for c in cases])
        y = torch.stack([torch.as_tensor(c["label"]) for c in cases])
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        spent += time.perf_counter() - t0
    model.eval()
    dice, iou = DiceMetric(include_background=True, reduction="mean_batch"), MeanIoU(include_background=True,
                                                                                     reduction="mean_batch")
    with torch.no_grad():
        for case in val:
            x, y = torch.as_tensor(case["image"])[None], torch.as_tensor(case["label"])[None].long()
            logits = sliding_window_inference(x, (128, 128), 4, model, overlap=0.25)
            pred = torch.nn.functional.one_hot(logits.argmax(1), 2).permute(0, 3, 1, 2)
            truth = torch.nn.functional.one_hot(y[:, 0], 2).permute(0, 3, 1, 2)
            dice(pred, truth)
            iou(pred, truth)
    d, m = dice.aggregate(), iou.aggregate()
    print(json.dumps({"seed": args.seed, "seconds": round(spent, 1), "steps": steps,
                      "dice_membrane": round(float(d[1]), 4), "miou": round(float(m.mean()), 4),
                      "iou_per_class": [round(float(v), 4) for v in m]}))


if __name__ == "__main__":
    main()
