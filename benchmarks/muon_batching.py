"""Muon's step on llm/gpt's matrices: one matrix at a time (``muon_update`` per parameter, as MuonAdamW stepped
before 2c3b2e3) against same-shape batches (MuonAdamW now). Each way's median of 30 timed steps after 5 warm-up
steps, both ways run twice in turn, the lower median kept. Gradients are random: only the time is measured.

    python benchmarks/muon_batching.py [DEPTH ...]     # default: 4 (llm/gpt's depth at 5 min on 2 CPU cores)
"""
import statistics
import sys
import time

import torch

from recipe_zoo.core import optim
from recipe_zoo.recipes.llm import gpt, models

torch.manual_seed(0)
for depth in map(int, sys.argv[1:] or ["4"]):
    cfg = gpt.GPTConfig()
    model = models.GPT(gpt.shape_at(cfg, depth, 1024))
    opt = gpt.build_optimizer(cfg, model)
    muon = [g for g in opt.param_groups if g["optimizer"] == "muon"]
    mats = [p for g in muon for p in g["params"]]
    for p in mats:
        p.grad = torch.randn_like(p)
    bufs = [torch.zeros_like(p) for p in mats]

    def one_at_a_time():
        with torch.no_grad():
            for g in muon:
                for p in g["params"]:
                    i = next(j for j, q in enumerate(mats) if q is p)
                    u = optim.muon_update(p.grad, bufs[i], g["momentum"], g["ns_steps"])
                    if g["weight_decay"]:
                        p.sub_(p * ((u * p) > 0), alpha=g["lr"] * g["weight_decay"])
                    p.sub_(u, alpha=g["lr"])

    def batched():
        with torch.no_grad():
            for g in muon:
                opt._muon_step(g)

    times = {}
    for name, fn in [("one at a time", one_at_a_time), ("batched", batched)] * 2:
        for _ in range(5):
            fn()
        ts = []
        for _ in range(30):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        times.setdefault(name, []).append(statistics.median(ts))
    shapes = sorted({tuple(p.shape) for p in mats})
    print(f"depth {depth}: {len(mats)} matrices in {len(shapes)} shapes {shapes}; median ms/step: "
          + ", ".join(f"{k} {min(v) * 1e3:.1f}" for k, v in times.items())
          + f"; ratio {min(times['one at a time']) / min(times['batched']):.2f}x")
