"""The data layer: IDX files (``idx``), fetching them (``download``), the options of the data modules
(``options``), the LightningDataModules (``datamodule``), folders of image files (``image_files``, decoded by
``image_transforms``, served by ``image_folder``).

Every name loads on first use: ``import modelforge`` loads only ``options`` (to give Hydra the data defaults),
reading IDX files needs no Lightning, and the built-in ``data=`` names are registered here by where they live, so
``list`` names them without importing Lightning (the first lookup of one does).
"""

import importlib
from typing import Any

from modelforge.registry import DATAMODULES

DATAMODULES.add_deferred("mnist", "modelforge.data.datamodule:MNISTDataModule",
                         "MNIST digits (IDX files, checked, downloaded).")
DATAMODULES.add_deferred("fashion_mnist", "modelforge.data.datamodule:FashionMNISTDataModule",
                         "Fashion-MNIST clothing (IDX files, checked, downloaded).")
DATAMODULES.add_deferred("idx", "modelforge.data.datamodule:IdxDataModule",
                         "Any folder of the four IDX files: no checksums, no download; shapes, classes and stats from the files.")
for _name, _what in (("mnist_segment", "Digits on a 56x56 canvas and their per-pixel mask (task=segment), from MNIST."),
                     ("mnist_denoise", "Noisy MNIST digits in, clean ones out (task=reconstruct)."),
                     ("mnist_multilabel", "2x2 tiles of MNIST digits: which digits appear (task=multilabel)."),
                     ("mnist_sum", "2x2 tiles of MNIST digits: the sum of the four (task=regress).")):
    DATAMODULES.add_deferred(_name, f"modelforge.data.mnist_tasks:{_name.title().replace('_', '')}DataModule", _what)
DATAMODULES.add_deferred("segment_folder", "modelforge.data.task_files:SegmentFolderDataModule",
                         "images/ and masks/ PNG folders: a class index per pixel (task=segment).")
DATAMODULES.add_deferred("image_table", "modelforge.data.task_files:ImageTableDataModule",
                         "A CSV of image files and their numbers: labels (task=multilabel) or targets (task=regress).")
DATAMODULES.add_deferred("image_folder", "modelforge.data.image_folder:ImageFolderDataModule",
                         "Class folders of JPEG/PNG images (torchvision's ImageFolder layout), decoded in workers.")

_HOMES = {
    "build": ("build_datamodule", "describe_data"),
    "download": ("ensure_files", "find_file", "resolve_data_dir"),
    "idx": ("FASHION_MNIST", "FILE_NAMES", "IMAGES_MAGIC", "KNOWN_DATASETS", "LABELS_MAGIC", "MNIST", "IdxDataset",
            "load_idx_set", "parse_idx", "read_idx", "read_idx_bytes"),
    "options": ("IdxOptions", "ImageFolderOptions"),
    "image_files": ("ImageFolderIndex", "index_image_folder"),
    "image_transforms": ("ImageFiles", "ImagePipeline"),
    "image_folder": ("ImageFolderDataModule",),
    "datamodule": ("FashionMNISTDataModule", "IdxDataModule", "MNISTDataModule", "MnistBatches", "random_shift"),
    "split_loaders": ("ResumableShuffle", "SplitLoaders"),
    "mnist_tasks": ("DerivedDataModule", "TargetBatches", "derive", "digit_tiles"),
    "task_files": ("ImageTableDataModule", "SegmentFolderDataModule", "TaskFiles"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:  # Lightning loads with datamodule's names only
        return getattr(importlib.import_module(f"modelforge.data.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module 'modelforge.data' has no attribute {name!r}")
