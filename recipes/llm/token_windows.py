"""What ``llm/gpt`` and ``llm/lora`` (on text) train on: (input, target) windows of ``seq_len`` tokens drawn from one
token stream, every token once an epoch, in an order fixed by the seed, resumable and shared out among processes.
"""
from __future__ import annotations

import torch

from recipe_zoo.core.batches import to_device
from recipe_zoo.core.errors import ZooError


class TokenWindows:
    """(input, target) windows from one token stream. Each epoch shifts the window grid by a random
    offset and shuffles it, so every token is trained on once per epoch; state is (epoch, index).

    Under N processes ``index`` counts micro-batch slots and rank r takes slot ``index + r``, as one process
    accumulating N micro-batches does, across an epoch's end too (as ``core.batches.TensorBatches``)."""

    def __init__(self, tokens: torch.Tensor, seq_len: int, batch_size: int, seed: int, source: str = "",
                 device: torch.device | str = "cpu"):
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.device = torch.device(device)  # where the batches go (one pinned copy of the rows a step)
        self.windows = (len(tokens) - 1 - seq_len) // seq_len  # a grid shifted by < seq_len still fits
        if self.windows < batch_size:
            raise ZooError(f"{source + ': ' if source else ''}the training split has {len(tokens):,} tokens: fewer "
                           f"than one batch of {batch_size} windows of {seq_len}; lower micro_batch or seq_len, or "
                           "give more text")
        self.epoch, self.index = 0, 0
        self._grid: tuple[int, torch.Tensor] | None = None  # (epoch, its grid), the last one drawn
        self.rank, self.world = 0, 1
        self.offsets = torch.arange(seq_len + 1)

    def shard(self, rank: int, world: int) -> None:
        """Under N processes each step's N micro-batches are consecutive slices of the epoch's grid."""
        if self.windows < self.batch_size * world:
            raise ZooError(f"the training split has {self.windows:,} windows of {self.seq_len}: fewer than "
                           f"{world} processes x micro_batch {self.batch_size}")
        self.rank, self.world = rank, world

    @property
    def slots_per_epoch(self) -> int:  # micro-batches in one pass over the grid, all processes together
        return self.windows // self.batch_size

    @property
    def batches_per_epoch(self) -> int:
        return self.slots_per_epoch // self.world

    def _epoch_grid(self, epoch: int) -> torch.Tensor:
        if self._grid is None or self._grid[0] != epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            shift = int(torch.randint(self.seq_len, (1,), generator=g))
            self._grid = (epoch, shift + torch.randperm(self.windows, generator=g) * self.seq_len)
        return self._grid[1]

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        per_epoch = self.slots_per_epoch
        if self.index >= per_epoch:
            self.epoch, self.index = self.epoch + 1, self.index - per_epoch
        # this rank's micro-batch may open the next epoch (the step straddles the boundary)
        ahead, slot = divmod(self.index + self.rank, per_epoch)
        starts = self._epoch_grid(self.epoch + ahead)[slot * self.batch_size:(slot + 1) * self.batch_size]
        self.index += self.world
        rows = to_device(self.tokens[starts[:, None] + self.offsets].long(), self.device)
        return rows[:, :-1], rows[:, 1:]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index, self._grid = int(state["epoch"]), int(state["index"]), None

