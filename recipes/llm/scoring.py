"""Bits per byte, how both language models are scored: each scoring window's (or example's) summed next-token
cross-entropy and the bytes its targets spell, in chunks with progress for a long text, the total, and its 95%
bootstrap interval over the scored items.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from recipe_zoo.core import items, metrics


def window_sums(logits_fn, tokens: torch.Tensor, seq_len: int, batch_size: int, device,
                bytes_per_target: torch.Tensor, progress=None) -> tuple[np.ndarray, np.ndarray]:
    """Each scoring window's summed next-token cross-entropy (nats) and the bytes its targets spell: every
    token of ``tokens`` after the first is predicted once, in non-overlapping windows of ``seq_len`` (the
    last one shorter). ``bytes_per_target`` has one entry per predicted token.

    With ``progress``, in chunks of whole batches of windows so a long text shows progress: each batch holds the
    same windows as one pass would, so the sums are the same."""
    if progress is None:
        return _window_sums(logits_fn, tokens, seq_len, batch_size, device, bytes_per_target)
    n = len(tokens) - 1
    total = math.ceil(n / seq_len)
    chunk = batch_size * max(1, 64 // batch_size) * seq_len  # targets per chunk: whole batches of whole windows
    nats, n_bytes = [], []
    for a in range(0, n, chunk):
        part = _window_sums(logits_fn, tokens[a:a + chunk + 1], seq_len, batch_size, device,
                            bytes_per_target[a:a + chunk])
        nats.append(part[0])
        n_bytes.append(part[1])
        progress(min(total, math.ceil((a + chunk) / seq_len)), total, "windows")
    return np.concatenate(nats), np.concatenate(n_bytes)


@torch.no_grad()
def _window_sums(logits_fn, tokens: torch.Tensor, seq_len: int, batch_size: int, device,
                 bytes_per_target: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``window_sums`` in one pass."""
    n = len(tokens) - 1
    full = list(range(0, n - seq_len + 1, seq_len))
    groups = [(full[i:i + batch_size], seq_len) for i in range(0, len(full), batch_size)]
    if len(full) * seq_len < n:  # the last, shorter window on its own
        groups.append(([len(full) * seq_len], n - len(full) * seq_len))
    nats, n_bytes = [], []
    for starts, size in groups:
        rows = torch.stack([tokens[s:s + size + 1] for s in starts]).long().to(device)
        logits = logits_fn(rows[:, :-1]).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1), reduction="none")
        nats.extend(loss.view(len(starts), size).double().sum(1).tolist())
        n_bytes.extend(float(bytes_per_target[s:s + size].double().sum()) for s in starts)
    return np.array(nats), np.array(n_bytes)


def bits_per_byte(logits_fn, tokens: torch.Tensor, seq_len: int, batch_size: int, device,
                  bytes_per_target: torch.Tensor) -> float:
    """Sum of next-token cross-entropy (nats) over every token of ``tokens`` after the first, in
    non-overlapping windows of ``seq_len``, divided by ln 2 x the bytes those tokens spell."""
    nats, n_bytes = window_sums(logits_fn, tokens, seq_len, batch_size, device, bytes_per_target)
    return metrics.bits_per_byte(float(nats.sum()), float(n_bytes.sum()))


def bpb_items(nats: np.ndarray, n_bytes: np.ndarray, windows: bool = True) -> items.ItemScores:
    """Bits per byte item by item: each scored item's nats and bytes (the metric: the sum of their nats / ln 2 x
    the sum of their bytes). Windows of one text are neighbours whose losses go together (a scene, a speech), so
    they are resampled in contiguous blocks (``items.cube_root_block``); examples (JSONL) one by one."""
    nats, n_bytes = np.asarray(nats, dtype=np.float64), np.asarray(n_bytes, dtype=np.float64)
    return items.ItemScores("bpb", {"nats": nats, "bytes": n_bytes},
                            block=items.cube_root_block(len(nats)) if windows else 1)



def bpb_metrics(nats: np.ndarray, n_bytes: np.ndarray, prefix: str = "", windows: bool = True) -> dict[str, float]:
    """Bits per byte of the scored items and its 95% bootstrap interval over them (``bpb_items``), as the recipes
    report it; the test's scores go to the run."""
    scores = bpb_items(nats, n_bytes, windows)
    low, high = items.test_interval(scores) if prefix == "test_" else scores.interval()
    return {f"{prefix}bpb": metrics.bits_per_byte(float(nats.sum()), float(n_bytes.sum())),
            f"{prefix}bpb_ci_low": low, f"{prefix}bpb_ci_high": high}
