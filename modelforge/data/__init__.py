"""The data layer: IDX files (``idx``), fetching them (``download``), the LightningDataModules (``datamodule``).

Importing it registers the built-in ``data=`` names. ``import modelforge`` does not import it
(it loads Lightning), so code that looks up a data module imports ``modelforge.data`` first.
"""

from modelforge.data.build import build_datamodule, describe_data
from modelforge.data.datamodule import (
    FashionMNISTDataModule,
    IdxDataModule,
    MnistBatches,
    MNISTDataModule,
    ResumableShuffle,
    random_shift,
)
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
from modelforge.registry import DATAMODULES

DATAMODULES.add("mnist", MNISTDataModule)
DATAMODULES.add("fashion_mnist", FashionMNISTDataModule)
DATAMODULES.add("idx", IdxDataModule)

__all__ = [
    "FASHION_MNIST", "FILE_NAMES", "IMAGES_MAGIC", "KNOWN_DATASETS", "LABELS_MAGIC", "MNIST",
    "FashionMNISTDataModule", "IdxDataModule", "IdxDataset", "MNISTDataModule", "MnistBatches",
    "ResumableShuffle", "build_datamodule", "describe_data", "ensure_files", "find_file",
    "load_idx_set", "parse_idx", "random_shift", "read_idx_bytes", "resolve_data_dir",
]
