"""What every data module's loaders share: a training order that a resumed run keeps, and evaluation that counts
each image once under DDP. A data module mixes in :class:`SplitLoaders`, fills ``train_set``, ``val_set`` and
``test_set`` in ``setup`` and says how one split becomes a ``DataLoader`` (``_loader``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Dataset, Sampler


class ResumableShuffle(Sampler[int]):
    """Indices ``0..n-1`` in a new order every epoch, resumable mid-epoch: a resumed run keeps the batch order.
    Epoch ``e``'s order is ``randperm(n)`` seeded with ``seed + e`` (as ``DistributedSampler`` does); a
    checkpoint keeps the seed, the epoch and the samples served (:mod:`modelforge.train.checkpoints`)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch, self._skip = n, int(seed), 0, 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls it at the start of every epoch
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
        return self.n  # the whole epoch: Lightning counts a resumed epoch's batches from where it stopped


class SplitLoaders:
    """``train/val/test_dataloader`` and ``resume_shuffle`` for a LightningDataModule with ``batch_size``,
    ``eval_batch_size`` and ``drop_last`` options."""

    train_set: Dataset | None = None
    val_set: Dataset | None = None
    test_set: Dataset | None = None
    train_sampler: ResumableShuffle | None = None
    _resume_at: tuple[int, int, int] | None = None

    def _loader(self, dataset: Dataset, batch_size: int, **kwargs: Any) -> DataLoader:
        raise NotImplementedError  # the data module's: workers, collate, pinning

    def train_dataloader(self) -> DataLoader:
        dataset = self._ready(self.train_set)
        if getattr(self.trainer, "world_size", 1) > 1:
            # Lightning swaps in a DistributedSampler (shuffling, seeded per epoch) under DDP.
            return self._loader(dataset, self.batch_size, shuffle=True, drop_last=self.drop_last)
        # Its seed comes from the global seed (`seed=`), which makes the order repeatable.
        self.train_sampler = ResumableShuffle(len(dataset), seed=torch.initial_seed() % 2**62)
        if self._resume_at is not None:
            self.train_sampler.resume(*self._resume_at)
        # A generator of its own: creating the iterator then draws nothing from the global RNG.
        return self._loader(dataset, self.batch_size, sampler=self.train_sampler, drop_last=self.drop_last,
                            generator=torch.Generator().manual_seed(self.train_sampler.seed))

    def resume_shuffle(self, seed: int, epoch: int, skip: int) -> None:
        """Continue a checkpoint's batch order: ``seed``'s order at ``epoch``, less its first ``skip`` samples."""
        self._resume_at = (seed, epoch, skip)
        if self.train_sampler is not None:
            self.train_sampler.resume(seed, epoch, skip)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.val_set)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_set)

    def _eval_loader(self, dataset: Dataset | None) -> DataLoader:
        """Under DDP every image is evaluated once: Lightning's DistributedSampler would repeat some to even out
        the ranks (10,000 test images on 3 ranks: 2 counted twice); this one leaves them one sample apart."""
        dataset = self._ready(dataset)
        world = getattr(self.trainer, "world_size", 1)
        # Fewer images than ranks (a tiny val_size): Lightning's, which gives every rank one.
        sampler = UnrepeatedDistributedSampler(dataset, num_replicas=world, rank=self.trainer.global_rank,
                                               shuffle=False) if 1 < world <= len(dataset) else None
        return self._loader(dataset, self.eval_batch_size, sampler=sampler)

    def _ready(self, dataset: Dataset | None) -> Dataset:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for a dataloader")
        return dataset
