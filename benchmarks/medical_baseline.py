"""MONAI's own 2-D segmentation tutorial setting on ``isbi2012-membrane``, for the medical closing note.

    ZOO_DATA=../shared/data python benchmarks/medical_baseline.py --seconds 300 --seed 0

The configuration of MONAI's 2-D UNet tutorials, as the issue names it: intensities scaled to
[0, 1], random 128x128 crops (positive/negative label-balanced) with random flips, batch 8,
``UNet(spatial_dims=2, channels=(16, 32, 64, 128, 256), strides=(2, 2, 2, 2), num_res_units=2)``,
``DiceCELoss(to_onehot_y, softmax)``, Adam 1e-3, trained for a fixed number of wall-clock seconds.
Measured on the recipe's folds (``medical/unet``'s ``split_keys``: 5 folds of 6 test slices, fixed by a
hash of each slice's path): per fold it trains on the same 20 slices the recipe trains on (the recipe's
4 validation slices are left out, unused: the baseline selects nothing) for ``--seconds / --folds``, then
sliding-window inference (128x128 windows, overlap 0.25) on the fold's 6 test slices and MONAI's Dice /
mean IoU, with membrane (mask value 0) as class 1. ``test_dice`` is the mean over folds, as the recipe's.
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
from recipe_zoo.recipes.medical.split import split_keys


def load(root: Path, ids):
    from PIL import Image

    out = []
    for i in ids:
        image = np.asarray(Image.open(root / "image" / f"{i}.png"), dtype=np.float32)[None] / 255.0
        mask = np.asarray(Image.open(root / "label" / f"{i}.png"))
        out.append({"image": image, "label": (mask == 0).astype(np.float32)[None]})  # membrane = value 0
    return out


def train_and_test(train, test, seconds: float, seed: int) -> dict:
    """One fold: the tutorial's training for ``seconds``, then Dice / IoU on the whole test slices."""
    from monai.inferers import sliding_window_inference
    from monai.losses import DiceCELoss
    from monai.metrics import DiceMetric, MeanIoU
    from monai.networks.nets import UNet
    from monai.transforms import Compose, RandCropByPosNegLabeld, RandFlipd

    torch.manual_seed(seed)
    aug = Compose([RandCropByPosNegLabeld(["image", "label"], "label", (128, 128), pos=1, neg=1, num_samples=1),
                   RandFlipd(["image", "label"], prob=0.5, spatial_axis=0),
                   RandFlipd(["image", "label"], prob=0.5, spatial_axis=1)])
    aug.set_random_state(seed=seed)
    model = UNet(spatial_dims=2, in_channels=1, out_channels=2, channels=(16, 32, 64, 128, 256),
                 strides=(2, 2, 2, 2), num_res_units=2)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    rng = np.random.default_rng(seed)
    steps, spent = 0, 0.0
    while spent < seconds:
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
        for case in test:
            x, y = torch.as_tensor(case["image"])[None], torch.as_tensor(case["label"])[None].long()
            logits = sliding_window_inference(x, (128, 128), 4, model, overlap=0.25)
            pred = torch.nn.functional.one_hot(logits.argmax(1), 2).permute(0, 3, 1, 2)
            truth = torch.nn.functional.one_hot(y[:, 0], 2).permute(0, 3, 1, 2)
            dice(pred, truth)
            iou(pred, truth)
    d, m = dice.aggregate(), iou.aggregate()
    return {"seconds": spent, "steps": steps, "dice": float(d[1]), "miou": float(m.mean()),
            "iou": [float(v) for v in m]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=300, help="training seconds in all, split evenly over the folds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--folds", type=int, default=5, help="the recipe's folds (medical/unet folds=...)")
    p.add_argument("--val-fraction", type=float, default=0.2,
                   help="the recipe's val_fraction: those slices are left out of training, as in the recipe")
    args = p.parse_args()
    root = locate("isbi2012-membrane")
    keys = [f"image/{i}.png" for i in range(30)]  # the recipe's case keys: paths relative to the dataset root
    ids = {key: int(Path(key).stem) for key in keys}
    folds = []
    for k, (train_keys, _, test_keys) in enumerate(split_keys(keys, args.folds, args.val_fraction, 0.2)):
        train, test = load(root, [ids[key] for key in train_keys]), load(root, [ids[key] for key in test_keys])
        result = train_and_test(train, test, args.seconds / args.folds, args.seed * 1000 + k)
        folds.append({**result, "test_slices": [ids[key] for key in test_keys]})
    dice = [f["dice"] for f in folds]
    print(json.dumps({"seed": args.seed, "folds": args.folds, "seconds": round(sum(f["seconds"] for f in folds), 1),
                      "steps": sum(f["steps"] for f in folds), "test_dice": round(float(np.mean(dice)), 4),
                      "test_dice_std": round(float(np.std(dice, ddof=1)), 4) if len(dice) > 1 else 0.0,
                      "test_miou": round(float(np.mean([f["miou"] for f in folds])), 4),
                      "per_fold": [{"test_slices": f["test_slices"], "dice_membrane": round(f["dice"], 4),
                                    "miou": round(f["miou"], 4)} for f in folds]}))


if __name__ == "__main__":
    main()
