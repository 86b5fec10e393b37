"""The real MNIST files (``<repo>/../shared/datasets/mnist`` or ``$MODELFORGE_DATA``): slow, never downloaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from modelforge.data import FILE_NAMES, MNIST, MNISTDataModule, find_file, load_idx_set

REPO = Path(__file__).resolve().parents[2]


def _real_mnist_dir() -> Path:
    candidates = [Path(os.environ["MODELFORGE_DATA"])] if os.environ.get("MODELFORGE_DATA") else []
    candidates.append(REPO.parent / "shared" / "datasets" / "mnist")
    for folder in candidates:
        if all(find_file(folder, name) for name in FILE_NAMES):
            return folder
    pytest.skip(f"real MNIST not found in {' or '.join(map(str, candidates))} (set MODELFORGE_DATA to a "
                "folder with the four IDX files); not downloading in tests")


@pytest.mark.slow
def test_real_mnist_checks_and_shapes() -> None:
    folder = _real_mnist_dir()
    splits = load_idx_set({name: find_file(folder, name) for name in FILE_NAMES}, MNIST)  # md5s and headers
    images, labels = splits["train"]
    assert images.shape == (60000, 28, 28) and labels.shape == (60000,)
    assert splits["test"][0].shape == (10000, 28, 28) and splits["test"][1].shape == (10000,)
    assert labels.bincount().tolist()[:3] == [5923, 6742, 5958]  # the well-known class counts
    assert abs(images.float().mean().item() / 255 - 0.1307) < 1e-3
    assert abs(images.float().std().item() / 255 - 0.3081) < 1e-3


@pytest.mark.slow
def test_real_mnist_datamodule() -> None:
    dm = MNISTDataModule(data_dir=_real_mnist_dir(), download=False)
    assert dm.check() == {"train": 55000, "val": 5000, "test": 10000}
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (128, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    full = torch.cat([x for x, _ in dm.val_dataloader()])
    assert abs(full.mean().item()) < 0.05 and abs(full.std().item() - 1) < 0.05
