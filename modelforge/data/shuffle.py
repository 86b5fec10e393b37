"""A shuffling sampler whose position can be saved and restored: resume continues the batch order.

The order of epoch ``e`` is ``randperm(n)`` from a generator seeded with ``seed + e`` (as
``DistributedSampler`` does), so it depends on nothing but the seed and the epoch; a resumed
run gets the epoch and the number of samples already served from the checkpoint
(:mod:`modelforge.train.checkpoints`) and skips those.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler


class ResumableShuffle(Sampler[int]):
    """Indices ``0..n-1`` in a new seeded order every epoch, resumable mid-epoch."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.seed = int(seed)
        self.epoch = 0
        self._skip = 0  # samples of the current epoch served before a resume

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this at the start of every epoch."""
        if epoch != self.epoch:
            self.epoch, self._skip = epoch, 0

    def resume(self, seed: int, epoch: int, skip: int) -> None:
        """Continue the order of ``seed`` at ``epoch``, leaving out its first ``skip`` samples."""
        self.seed, self.epoch, self._skip = int(seed), int(epoch), int(skip)

    def state(self) -> dict[str, Any]:
        return {"seed": self.seed, "epoch": self.epoch}

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        skip, self._skip = self._skip, 0
        yield from order[skip:].tolist()

    def __len__(self) -> int:
        # The whole epoch: Lightning counts a resumed epoch's batches from where it stopped.
        return self.n
