"""Sets for the tasks beyond classification, derived from MNIST's IDX files: offline and deterministic.

- ``mnist_segment``: a 56x56 canvas of a 2x2 grid of cells, each holding a digit with probability 3/4, shifted by
  up to 4 pixels; the mask gives each pixel its class: 0 background, 1..10 the digits 0..9 (a pixel of a digit is
  one of at least half intensity; a later digit overlapping an earlier one wins).
- ``mnist_denoise``: a digit with Gaussian noise in (``data.noise``, clipped to [0, 1]), the clean digit out.
- ``mnist_multilabel``: a 56x56 tile of four digits; the targets say which of the ten digits appear (0/1 each).
- ``mnist_sum``: the same tiles; the target is the sum of their four digits (0..36), one number.

A sample is drawn from the source images with a generator seeded per split (not the run's seed): every run, on
every machine, sees the same sets. Inputs are normalized as MNIST's (denoising: pixels in [0, 1], as its targets).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from modelforge.data.datamodule import MNISTDataModule, _batch_as_is  # noqa: F401 - _loader's collate
from modelforge.data.options import DERIVED_CLASS_NAMES, DerivedOptions

CANVAS, CELL, SHIFT = 56, 28, 4
TRAIN_SEED, TEST_SEED = 1234, 5678  # per split: the test set never shares draws with the training set
_SEEDS = {"train": TRAIN_SEED, "test": TEST_SEED}


def digit_tiles(images: Tensor, labels: Tensor, n: int, seed: int, *, present: float = 1.0,
                shift: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """``n`` canvases [n, 56, 56] uint8 of a 2x2 grid of digits, their masks [n, 56, 56] (0 background, 1 + digit)
    and the digits of each cell [n, 4] (-1: the cell is empty)."""
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(labels), (n, 4), generator=gen)
    shown = torch.rand(n, 4, generator=gen) < present
    offsets = torch.randint(0, 2 * shift + 1, (n, 4, 2), generator=gen)
    side = CANVAS + 2 * shift
    canvas = torch.zeros(n, side, side, dtype=torch.uint8)
    mask = torch.zeros(n, side, side, dtype=torch.uint8)
    rows_of = torch.arange(n).view(n, 1, 1)
    span = torch.arange(CELL)
    for cell in range(4):
        top, left = CELL * (cell // 2), CELL * (cell % 2)
        rows = (top + offsets[:, cell, 0]).view(n, 1, 1) + span.view(1, CELL, 1)
        cols = (left + offsets[:, cell, 1]).view(n, 1, 1) + span.view(1, 1, CELL)
        digit = images[picks[:, cell]] * shown[:, cell].view(n, 1, 1)
        canvas[rows_of, rows, cols] = torch.maximum(canvas[rows_of, rows, cols], digit)
        ink = digit >= 128
        label = (labels[picks[:, cell]] + 1).to(torch.uint8).view(n, 1, 1).expand_as(digit)
        mask[rows_of, rows, cols] = torch.where(ink, label, mask[rows_of, rows, cols])
    crop = slice(shift, shift + CANVAS)
    digits = torch.where(shown, labels[picks], torch.full_like(labels[picks], -1))
    return canvas[:, crop, crop].contiguous(), mask[:, crop, crop].contiguous(), digits


def derive(kind: str, images: Tensor, labels: Tensor, n: int, seed: int, noise: float) -> tuple[Tensor, Tensor]:
    """Inputs uint8 [n, H, W] and targets of the set ``kind`` made from ``images`` and ``labels``."""
    if kind == "mnist_denoise":
        gen = torch.Generator().manual_seed(seed)
        clean = images[torch.randint(len(labels), (n,), generator=gen)]
        noisy = clean.float() + torch.randn(clean.shape, generator=gen) * (noise * 255.0)
        return noisy.round_().clamp_(0, 255).to(torch.uint8), clean
    if kind == "mnist_segment":
        canvas, mask, _ = digit_tiles(images, labels, n, seed, present=0.75, shift=SHIFT)
        return canvas, mask  # uint8: a batch's masks become int64 when served
    canvas, _, digits = digit_tiles(images, labels, n, seed)
    if kind == "mnist_multilabel":
        return canvas, torch.zeros(n, 10).scatter_(1, digits, 1.0)
    return canvas, digits.sum(1, keepdim=True).float()  # mnist_sum


class TargetBatches(Dataset):
    """Images uint8 [N, H, W] and their targets, fetched a batch at a time (as ``MnistBatches``). uint8 targets
    are images (``image_targets``: float [B, 1, H, W] in [0, 1]) or masks (int64 [B, H, W]); labels and numbers
    (float) pass as they are."""

    def __init__(self, images: Tensor, targets: Tensor, *, normalize: bool, mean: float, std: float,
                 image_targets: bool = False) -> None:
        self.images, self.targets, self.normalize, self.mean, self.std = images, targets, normalize, mean, std
        self.image_targets = image_targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitems__(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long).to(self.images.device)
        x = self.images[index].unsqueeze(1).float().div_(255.0)
        if self.normalize:
            x = x.sub_(self.mean).div_(self.std)
        y = self.targets[index]
        if y.dtype == torch.uint8:
            y = y.unsqueeze(1).float().div_(255.0) if self.image_targets else y.long()
        return x, y

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        x, y = self.__getitems__([i])
        return x[0], y[0]

    def to(self, device: torch.device) -> TargetBatches:
        self.images, self.targets = self.images.to(device), self.targets.to(device)
        return self

    @property
    def labels(self) -> Tensor:  # what SplitLoaders and the resume state count samples by
        return self.targets


class DerivedDataModule(DerivedOptions, MNISTDataModule):
    """A set derived from MNIST for a task other than classify (which one: ``kind``, the data module's name).
    Batches: ``(images float32 [B, 1, H, W], targets)``; ``target`` names the kind of target (tasks.OUTPUTS)."""

    kind = "mnist_segment"
    _derived: dict[str, tuple[Tensor, Tensor]] | None = None

    @property
    def name(self) -> str:
        return self.kind

    @property
    def target(self) -> str:
        return {"mnist_segment": "class_map", "mnist_denoise": "image", "mnist_multilabel": "labels",
                "mnist_sum": "numbers"}[self.kind]

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (1, 28, 28) if self.kind == "mnist_denoise" else (1, CANVAS, CANVAS)

    @property
    def n_classes(self) -> int | None:  # the output's width: classes of a pixel, labels, numbers
        return {"mnist_segment": 11, "mnist_denoise": None, "mnist_multilabel": 10, "mnist_sum": 1}[self.kind]

    @property
    def class_names(self) -> tuple[str, ...]:
        return DERIVED_CLASS_NAMES.get(self.kind, ())

    def check(self) -> dict[str, int]:
        n_val = self._val_count(self.n_train)
        self._load()  # the IDX files' checks, now
        return {"train": self.n_train - n_val, "val": n_val, "test": self.n_test}

    def describe(self) -> dict[str, Any]:
        return {"target": self.target, "splits": self.check()}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            derived = self._derive()
            images, targets = derived["train"]
            order = torch.randperm(len(targets), generator=torch.Generator().manual_seed(self.seed))
            val_idx, train_idx = order.tensor_split([self._val_count(len(targets))])
            denoise = self.kind == "mnist_denoise"  # its input and target are both pixels in [0, 1]
            mean, std = self.normalization() if self.normalize and not denoise else (0.0, 1.0)
            common = dict(normalize=self.normalize and not denoise, mean=mean, std=std, image_targets=denoise)
            self.train_set = TargetBatches(images[train_idx], targets[train_idx], **common)
            self.val_set = TargetBatches(images[val_idx], targets[val_idx], **common)
            self.test_set = TargetBatches(*derived["test"], **common)
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        for dataset in (self.train_set, self.val_set, self.test_set):
            dataset.to(device)

    def _derive(self) -> dict[str, tuple[Tensor, Tensor]]:
        if self._derived is None:
            sizes = {"train": self.n_train, "test": self.n_test}
            self._derived = {split: derive(self.kind, *self._load()[split], sizes[split], _SEEDS[split], self.noise)
                             for split in ("train", "test")}
        return self._derived


def _kind(name: str) -> type[DerivedDataModule]:
    return type(f"{name.title().replace('_', '')}DataModule", (DerivedDataModule,),
                {"kind": name, "__module__": __name__, "__doc__": DerivedDataModule.__doc__})


MnistSegmentDataModule = _kind("mnist_segment")
MnistDenoiseDataModule = _kind("mnist_denoise")
MnistMultilabelDataModule = _kind("mnist_multilabel")
MnistSumDataModule = _kind("mnist_sum")
