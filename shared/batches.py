"""Micro-batches from in-memory tensors whose whole state is a position, so resume is exact.

Each epoch's order is a permutation drawn from (seed, epoch), and each batch's augmentation draws
from a generator seeded by (seed, epoch, index): restoring (epoch, index) replays the same data
order and the same augmentations without saving any generator state.

Under N processes (``shard(rank, world)``) a step's N micro-batches are consecutive slices of the one
order, each rank taking slot ``index + rank`` of the group's position ``index``: two processes at batch B
see the data (and, with the seed drawn per slot, the augmentations) of one process at batch B with two
accumulation steps. That holds across epoch boundaries too: when an epoch's micro-batches do not divide
by N, a step takes the last of one epoch and the first of the next, as one process accumulating does.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Transform = Callable[[tuple[torch.Tensor, ...], torch.Generator], tuple[torch.Tensor, ...]]


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host batch onto ``device`` without stalling the host. A copy from ordinary (pageable) memory to a GPU
    first waits for the GPU's queue to drain, a sync per step; from pinned memory it is queued behind the work
    already there (the pinned block is kept until the copy is done: torch's caching host allocator)."""
    device = torch.device(device)
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device, non_blocking=True)


def batch_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one batch's draws: a function of its position alone, so resume replays it."""
    return ((seed * 1_000_003 + epoch) * 1_000_003 + index) % 2**63


class TensorBatches:
    """Micro-batches of ``tensors`` (tensors, or arrays read from disk as they are used: ``core.streams``).

    ``workers`` > 0 reads the next batches in that many worker processes (for data on disk: decoding, reading);
    ``device``: where a batch goes before ``transform`` (augmentation on the accelerator). ``transform`` draws its
    random numbers from a CPU generator seeded by the batch's position on every device, so a GPU run augments
    exactly as a CPU run does (the reference runs rely on it)."""

    def __init__(self, tensors: Sequence, batch_size: int, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = True, transform: Transform | None = None, workers: int = 0,
                 device: torch.device | str | None = None):
        n = len(tensors[0])
        if any(len(t) != n for t in tensors):
            raise ValueError("all tensors must have the same first dimension")
        if n == 0:
            raise ValueError("no samples to train on")
        self.tensors = tuple(tensors)
        self.batch_size = min(batch_size, n)
        self.seed, self.shuffle, self.drop_last, self.transform = seed, shuffle, drop_last, transform
        self.device = torch.device(device) if device is not None else None
        self.num_samples = n
        self.epoch, self.index = 0, 0
        self.rank, self.world = 0, 1
        self._order: tuple[int, torch.Tensor] | None = None  # (epoch, its order), the last one drawn
        from recipe_zoo.core.streams import Prefetch

        self.prefetch = Prefetch(self, workers) if workers > 0 else None

    def shard(self, rank: int, world: int) -> None:
        """This process's share: every world-th micro-batch of each step (full batches only). Data smaller
        than a batch per process gets a batch of ``samples // world`` each, as one process gets all of it."""
        if self.num_samples < world:
            raise ValueError(f"{self.num_samples} samples cannot be split over {world} processes")
        self.batch_size = min(self.batch_size, self.num_samples // world)
        self.rank, self.world, self.drop_last = rank, world, True
        if self.prefetch is not None:
            self.prefetch.reset()

    @property
    def slots_per_epoch(self) -> int:
        """Micro-batches in one pass over the data, all processes together."""
        full, rest = divmod(self.num_samples, self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    @property
    def batches_per_epoch(self) -> int:
        return self.slots_per_epoch // self.world

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        if self._order is None or self._order[0] != epoch:
            if self.shuffle:
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                self._order = (epoch, torch.randperm(self.num_samples, generator=g))
            else:
                self._order = (epoch, torch.arange(self.num_samples))
        return self._order[1]

    def position(self, epoch: int, index: int) -> tuple[tuple[int, int], torch.Tensor]:
        """The micro-batch this rank takes at position (epoch, index): its (epoch, slot) and its rows."""
        per_epoch = self.slots_per_epoch
        if index >= per_epoch:
            epoch, index = epoch + 1, index - per_epoch
        slot = index + self.rank
        if slot >= per_epoch:  # this rank's micro-batch opens the next epoch (the step straddles the boundary)
            epoch, slot = epoch + 1, slot - per_epoch
        return (epoch, slot), self._epoch_order(epoch)[slot * self.batch_size:(slot + 1) * self.batch_size]

    def advance(self, epoch: int, index: int) -> tuple[int, int]:
        """The position after (epoch, index)."""
        per_epoch = self.slots_per_epoch
        if index >= per_epoch:
            epoch, index = epoch + 1, index - per_epoch
        return epoch, index + self.world

    def next_batch(self) -> tuple[torch.Tensor, ...]:
        from recipe_zoo.core.streams import take

        (epoch, slot), idx = self.position(self.epoch, self.index)
        if self.prefetch is not None:
            batch = self.prefetch.next(epoch, slot)
        else:
            batch = tuple(take(t, idx) for t in self.tensors)
        self.epoch, self.index = self.advance(self.epoch, self.index)
        if self.device is not None:
            batch = tuple(to_device(t, self.device) for t in batch)
        if self.transform is not None:
            g = torch.Generator()  # on the CPU whatever the batch's device: the same draws everywhere
            g.manual_seed(batch_seed(self.seed, epoch, slot))
            batch = self.transform(batch, g)
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index, self._order = int(state["epoch"]), int(state["index"]), None
        if self.prefetch is not None:
            self.prefetch.reset()
