"""Micro-batches from in-memory tensors whose whole state is a position, so resume is exact.

Each epoch's order is a permutation drawn from (seed, epoch), and each batch's augmentation draws
from a generator seeded by (seed, epoch, index): restoring (epoch, index) replays the same data
order and the same augmentations without saving any generator state.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Transform = Callable[[tuple[torch.Tensor, ...], torch.Generator], tuple[torch.Tensor, ...]]


def batch_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one batch's draws: a function of its position alone, so resume replays it."""
    return ((seed * 1_000_003 + epoch) * 1_000_003 + index) % 2**63


class TensorBatches:
    def __init__(self, tensors: Sequence[torch.Tensor], batch_size: int, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = True, transform: Transform | None = None):
        n = len(tensors[0])
        if any(len(t) != n for t in tensors):
            raise ValueError("all tensors must have the same first dimension")
        if n == 0:
            raise ValueError("no samples to train on")
        self.tensors = tuple(tensors)
        self.batch_size = min(batch_size, n)
        self.seed, self.shuffle, self.drop_last, self.transform = seed, shuffle, drop_last, transform
        self.num_samples = n
        self.epoch, self.index = 0, 0
        self._order: torch.Tensor | None = None

    @property
    def batches_per_epoch(self) -> int:
        full, rest = divmod(self.num_samples, self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def _epoch_order(self) -> torch.Tensor:
        if self._order is None:
            if self.shuffle:
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
                self._order = torch.randperm(self.num_samples, generator=g)
            else:
                self._order = torch.arange(self.num_samples)
        return self._order

    def next_batch(self) -> tuple[torch.Tensor, ...]:
        if self.index >= self.batches_per_epoch:
            self.epoch, self.index, self._order = self.epoch + 1, 0, None
        order = self._epoch_order()
        idx = order[self.index * self.batch_size:(self.index + 1) * self.batch_size]
        batch = tuple(t[idx.to(t.device)] for t in self.tensors)
        if self.transform is not None:
            g = torch.Generator(device=batch[0].device)
            g.manual_seed(batch_seed(self.seed, self.epoch, self.index))
            batch = self.transform(batch, g)
        self.index += 1
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index, self._order = int(state["epoch"]), int(state["index"]), None
