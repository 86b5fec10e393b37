"""The data layer: IDX files (``idx``), fetching them (``download``), the LightningDataModules (``datamodule``).

Reading IDX files needs no Lightning: the data modules load on first use, and importing
``modelforge.data.datamodule`` registers the built-in ``data=`` names (``build_datamodule`` does it).
"""

from typing import Any

from modelforge.data.build import build_datamodule, describe_data
from modelforge.data.download import ensure_files, find_file, resolve_data_dir
from modelforge.data.idx import (
    FASHION_MNIST,
    FILE_NAMES,
    IMAGES_MAGIC,
    KNOWN_DATASETS,
    LABELS_MAGIC,
    MNIST,
    IdxDataset,
    load_idx_set,
    parse_idx,
    read_idx_bytes,
)

__all__ = [
    "FASHION_MNIST", "FILE_NAMES", "IMAGES_MAGIC", "KNOWN_DATASETS", "LABELS_MAGIC", "MNIST",
    "FashionMNISTDataModule", "IdxDataModule", "IdxDataset", "MNISTDataModule", "MnistBatches",
    "ResumableShuffle", "build_datamodule", "describe_data", "ensure_files", "find_file",
    "load_idx_set", "parse_idx", "random_shift", "read_idx_bytes", "resolve_data_dir",
]


def __getattr__(name: str) -> Any:
    if name in __all__:  # a name of data/datamodule.py: Lightning loads here, not on `import modelforge.data`
        from modelforge.data import datamodule

        return getattr(datamodule, name)
    raise AttributeError(f"module 'modelforge.data' has no attribute {name!r}")
