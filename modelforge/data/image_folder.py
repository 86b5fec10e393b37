"""``data=image_folder``: a folder of class folders of JPEG/PNG images as a LightningDataModule.

The files are found and their headers checked once (:mod:`modelforge.data.image_files`), before the model is
built; DataLoader workers decode them (:mod:`modelforge.data.image_transforms`). The class names, in label order,
are recorded in the run's config (``data.classes``), so its checkpoint, ``eval``'s confusion matrix and ``predict``
name the classes as the folders do. Options: :class:`~modelforge.data.options.ImageFolderOptions`.
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from modelforge.data.image_files import ImageFolderIndex, index_image_folder
from modelforge.data.image_transforms import ImageFiles, ImagePipeline
from modelforge.data.options import ImageFolderOptions
from modelforge.data.split_loaders import SplitLoaders

log = logging.getLogger(__name__)


class ImageFolderDataModule(SplitLoaders, ImageFolderOptions, pl.LightningDataModule):
    """Class folders of images (torchvision's ImageFolder layout); batches ``(float32 [B, C, S, S], int64 [B])``."""

    name = "image_folder"
    _index: ImageFolderIndex | None = None

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (1 if self.grayscale else 3, self.image_size, self.image_size)

    @property
    def class_names(self) -> tuple[str, ...]:
        classes = self.index().classes
        return classes + tuple(str(k) for k in range(len(classes), self.n_classes))

    @property
    def n_classes(self) -> int:
        return self._n_classes if self._n_classes is not None else len(self.index().classes)

    def index(self) -> ImageFolderIndex:
        """The classes and images of each split, found once (the headers of every file read)."""
        if self._index is None:
            self._index = index_image_folder(self.root, self.classes, self.val_size, self.test_size, self.seed)
            if self._n_classes is not None and self._n_classes < len(self._index.classes):
                from modelforge.errors import ConfigError

                raise ConfigError("data.n_classes", f"{self._n_classes} is fewer than the {len(self._index.classes)} "
                                  f"class folders of {self.root}", hint="data.n_classes=null takes their number")
            log.info(self._index.describe())
        return self._index

    def resolved_options(self) -> dict[str, Any]:
        """The options a run records in its config as found here: its classes (the label order), mean and std."""
        return {"classes": list(self.index().classes), "mean": list(self.mean), "std": list(self.std)}

    def describe(self) -> dict[str, Any]:
        """For metrics.json's ``data``: the class names, the split sizes and the files skipped."""
        index = self.index()
        return {"classes": list(index.classes), "splits": index.sizes(), "skipped": len(index.skipped)}

    def check(self) -> dict[str, int]:
        return self.index().sizes()

    def prepare_data(self) -> None:
        self.check()

    def pipeline(self, train: bool) -> ImagePipeline:
        return ImagePipeline(self.image_size, self.resize_size, self.interpolation, self.mean, self.std,
                             self.normalize, self.grayscale, self.random_resized_crop if train else None,
                             self.horizontal_flip and train)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            splits = self.index().splits
            self.train_set = ImageFiles(splits["train"], self.pipeline(train=True))
            self.val_set = ImageFiles(splits["val"], self.pipeline(train=False))
            self.test_set = ImageFiles(splits.get("test", splits["val"]), self.pipeline(train=False))

    def _loader(self, dataset: ImageFiles, batch_size: int, **kwargs: Any) -> DataLoader:
        workers = self.num_workers
        return DataLoader(dataset, batch_size=batch_size, num_workers=workers, persistent_workers=workers > 0,
                          pin_memory=torch.cuda.is_available(), **kwargs)
