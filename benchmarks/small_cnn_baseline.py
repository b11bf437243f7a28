"""Reference point for vision/resnet on cifar10-subset: the small CNN a user would write in 40 lines.

Widths 32/64/128, two 3x3 convs per stage, BN, GELU, max-pool; SGD-Nesterov lr 0.04 with a
time-based one-cycle, batch 256, label smoothing 0.2, flip + translate, channels-last, flip TTA.
Deliberately independent of the zoo. Usage: ZOO_DATA=../shared/data python benchmarks/small_cnn_baseline.py 300
"""
import os, sys, time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

budget = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
torch.manual_seed(seed)
root = Path(os.environ.get("ZOO_DATA", Path.home() / ".cache/zoo")) / "vision/cifar10_subset"
classes = sorted(p.name for p in (root / "train").iterdir())


def load(split):
    files = [(f, i) for i, c in enumerate(classes) for f in sorted((root / split / c).iterdir())]
    x = np.stack([np.asarray(Image.open(f).convert("RGB")) for f, _ in files])
    return torch.tensor(x).permute(0, 3, 1, 2).float().div(255), torch.tensor([i for _, i in files])


(xtr, ytr), (xte, yte) = load("train"), load("test")
mean, std = xtr.mean((0, 2, 3), keepdim=True), xtr.std((0, 2, 3), keepdim=True)
xtr, xte = ((x - mean) / std for x in (xtr, xte))


def block(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(), nn.MaxPool2d(2)]


model = nn.Sequential(*block(3, 32), *block(32, 64), *block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(128, 10)).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.04, momentum=0.9, nesterov=True, weight_decay=5e-4)
trained, step, images = 0.0, 0, 0
while trained < budget:
    for idx in torch.randperm(len(ytr)).split(256):
        if trained >= budget:
            break
        t0 = time.perf_counter()
        p = trained / budget
        for g in opt.param_groups:  # time-based one-cycle: up for 25%, then linear down
            g["lr"] = 0.04 * (p / 0.25 if p < 0.25 else (1 - p) / 0.75)
        x, y = xtr[idx], ytr[idx]
        x = torch.where(torch.rand(len(x), 1, 1, 1) < 0.5, x.flip(-1), x)
        dx, dy = np.random.randint(-2, 3, 2)
        x = torch.roll(x, shifts=(int(dy), int(dx)), dims=(2, 3))
        loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y, label_smoothing=0.2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        trained += time.perf_counter() - t0
        step += 1
        images += len(idx)
model.eval()
with torch.no_grad():
    logits = sum(model(t.contiguous(memory_format=torch.channels_last)) for t in (xte, xte.flip(-1)))
acc = (logits.argmax(1) == yte).float().mean().item()
print(f"small-cnn baseline: accuracy {acc:.4f}  epochs {images / len(ytr):.1f}  {images / trained:.0f} img/s  "
      f"train_seconds {trained:.1f}  seed {seed}")
