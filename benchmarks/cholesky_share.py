"""The share of this CPU's fp32 matmul peak that one closed-form fit (fp64 Cholesky, then scipy's two triangular
solves: ``recipes/protein/closed_form.solve_spd``) reaches, by system size: what ``closed_form.CHOLESKY_SHARE``
plans the protein heads' grid with under a seconds budget.

    python benchmarks/cholesky_share.py [--rows 500 1000 2000 4000] [--trials 3]

Run it alone (a busy neighbour lowers the fits more than the 2048^2 matmul the peak is taken on). Prints the peak
(measured fresh, not the cache), then per size the best of ``--trials`` fits in seconds, its FLOP/s
(``closed_form.fit_flops``) and its share of the peak.
"""
from __future__ import annotations

import argparse
import time

import torch

from recipe_zoo.core.envinfo import hardware
from recipe_zoo.core.flops import _measure_matmul_flops
from recipe_zoo.recipes.protein.closed_form import fit_flops, solve_spd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    peak = _measure_matmul_flops()
    print(f"{hardware()}: fp32 matmul peak {peak / 1e9:.0f} GFLOP/s")
    g = torch.Generator().manual_seed(0)
    for rows in args.rows:
        A = torch.randn(rows, rows, dtype=torch.float64, generator=g)
        M, Y = A @ A.T / rows, torch.ones(rows, 1, dtype=torch.float64)
        solve_spd(M, 1.0, Y)  # warm-up
        best = float("inf")
        for _ in range(args.trials):
            start = time.perf_counter()
            solve_spd(M, 1.0, Y)
            best = min(best, time.perf_counter() - start)
        rate = fit_flops(rows) / best
        print(f"  {rows:6d} rows: {best:8.4f} s  {rate / 1e9:7.1f} GFLOP/s  share {rate / peak:.3f}")


if __name__ == "__main__":
    main()
