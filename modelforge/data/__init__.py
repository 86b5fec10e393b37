"""The MNIST data layer: IDX reading, file checks and download, and the LightningDataModule.

``MNISTDataModule`` is imported on first use, so ``modelforge.data.idx`` and
``modelforge.data.mnist_files`` stay usable (and fast to import) without Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelforge.data.idx import IMAGES_MAGIC, LABELS_MAGIC, parse_idx, read_idx_bytes
from modelforge.data.mnist_files import (
    MIRRORS,
    MNIST_FILES,
    MnistFile,
    ensure_files,
    find_file,
    load_mnist,
    read_checked,
    resolve_data_dir,
)

if TYPE_CHECKING:
    from modelforge.data.datamodule import MnistBatches, MNISTDataModule, random_shift

__all__ = [
    "IMAGES_MAGIC",
    "LABELS_MAGIC",
    "MIRRORS",
    "MNIST_FILES",
    "MNISTDataModule",
    "MnistBatches",
    "MnistFile",
    "ensure_files",
    "find_file",
    "load_mnist",
    "parse_idx",
    "random_shift",
    "read_checked",
    "read_idx_bytes",
    "resolve_data_dir",
]

_LAZY = {"MNISTDataModule", "MnistBatches", "random_shift"}


def __getattr__(name: str) -> Any:
    # Lightning costs ~1 s to import; only the data module needs it.
    if name in _LAZY:
        from modelforge.data import datamodule

        return getattr(datamodule, name)
    raise AttributeError(f"module 'modelforge.data' has no attribute {name!r}")
