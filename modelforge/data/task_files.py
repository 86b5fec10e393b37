"""Your own data for the tasks beyond classification, in the layouts people use; every file checked before training.

- ``data=segment_folder data.root=DIR``: ``DIR/images/*.png`` and ``DIR/masks/*.png``, a mask per image with the
  same name, of the same size, each pixel a class index (a palette PNG is read as its indices; 255: "void", left out
  of the loss). ``task=segment``.
- ``data=image_table data.root=DIR``: ``DIR/targets.csv`` (``data.csv``), a header ``file,NAME,...`` then a row
  per image: its path (relative to DIR) and a number per column. Columns of only 0 and 1 are labels (``task=
  multilabel``); other numbers are targets (``task=regress``).

Images are read as gray (``data.grayscale=false``: RGB), all of one size; the split is seeded (``data.val_size``,
``data.test_size`` fractions). Each problem (a missing mask or file, a mask of another size, a class index out of
range, a cell that is not a number) is one DataError naming the file, raised when the shapes are first asked for,
before the model is built.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import DataLoader

from modelforge.data.mnist_tasks import TargetBatches, _batch_as_is
from modelforge.data.split_loaders import SplitLoaders
from modelforge.errors import ConfigError, DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
VOID = 255  # a mask pixel of this value belongs to no class (task=segment's loss ignores it)


class TaskFiles(SplitLoaders, pl.LightningDataModule):
    """Images and targets read from files once, held as tensors, split by ``seed``: the shared part of
    ``segment_folder`` and ``image_table``."""

    name = "task_files"
    target = "class_map"
    _read: tuple[Tensor, Tensor, list[str]] | None = None

    def __init__(self, root: str | Path | None = None, batch_size: int = 32, eval_batch_size: int | None = None,
                 val_size: float = 0.1, test_size: float = 0.1, seed: int = 0, num_workers: int = 0,
                 grayscale: bool = True, normalize: bool = True, drop_last: bool = False) -> None:
        super().__init__()
        if not root:
            raise ConfigError("data.root", f"missing: the folder of data={self.name}", hint="data.root=/path/to/it")
        for key, value in (("val_size", val_size), ("test_size", test_size)):
            if not isinstance(value, float) or not 0.0 < value < 0.5:
                raise ConfigError(f"data.{key}", f"got {value!r}", allowed="a fraction in (0, 0.5), like 0.1")
        self.root, self.seed, self.val_size, self.test_size = Path(root).expanduser(), seed, val_size, test_size
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.grayscale, self.normalize, self.drop_last = num_workers, grayscale, normalize, drop_last

    def _files(self) -> tuple[Tensor, Tensor, list[str]]:
        raise NotImplementedError  # images uint8 [N, C, H, W], targets, the names of the target's entries

    def _load(self) -> tuple[Tensor, Tensor, list[str]]:
        if self._read is None:
            self._read = self._files()
        return self._read

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(int(d) for d in self._load()[0].shape[1:])  # type: ignore[return-value]

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self._load()[2])

    @property
    def n_classes(self) -> int:
        return len(self._load()[2])

    def check(self) -> dict[str, int]:
        n = len(self._load()[1])
        n_val, n_test = max(1, round(self.val_size * n)), max(1, round(self.test_size * n))
        if n - n_val - n_test < 1:
            raise DataError(f"data.root: {self.root} holds {n} images: too few to hold out {n_val} for validation "
                            f"and {n_test} for test")
        return {"train": n - n_val - n_test, "val": n_val, "test": n_test}

    def prepare_data(self) -> None:
        self.check()

    def describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "target": self.target, "splits": self.check()}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            images, targets, _ = self._load()
            sizes = self.check()
            order = torch.randperm(len(targets), generator=torch.Generator().manual_seed(self.seed))
            val, test, train = order.tensor_split([sizes["val"], sizes["val"] + sizes["test"]])
            pixels = images[train].float().div(255.0)  # the training images' statistics
            mean, std = (float(pixels.mean()), float(pixels.std()) or 1.0) if self.normalize else (0.0, 1.0)
            # TargetBatches takes [N, H, W]: channels are kept by folding them into the batch read (gray: C = 1).
            self.train_set, self.val_set, self.test_set = (
                _ChannelBatches(images[idx], targets[idx], normalize=self.normalize, mean=mean, std=std)
                for idx in (train, val, test))

    def _loader(self, dataset: Any, batch_size: int, **kwargs: Any) -> DataLoader:
        return DataLoader(dataset, batch_size=batch_size, num_workers=self.num_workers, collate_fn=_batch_as_is,
                          persistent_workers=self.num_workers > 0, **kwargs)

    def _image(self, path: Path) -> np.ndarray:
        try:
            with Image.open(path) as picture:
                return np.array(picture.convert("L" if self.grayscale else "RGB"), dtype=np.uint8)
        except (OSError, UnidentifiedImageError) as exc:
            raise DataError(f"{path}: not a readable image ({exc})") from None

    def _stack(self, arrays: list[np.ndarray], paths: list[Path]) -> Tensor:
        """The images as uint8 [N, C, H, W]; one of another size than the first is an error naming it."""
        for array, path in zip(arrays, paths):
            if array.shape != arrays[0].shape:
                raise DataError(f"{path}: {array.shape[1]}x{array.shape[0]} pixels, but {paths[0]} (the first image) "
                                f"is {arrays[0].shape[1]}x{arrays[0].shape[0]}: every image must be of one size")
        stacked = torch.from_numpy(np.stack(arrays))
        return stacked.unsqueeze(1) if stacked.dim() == 3 else stacked.permute(0, 3, 1, 2).contiguous()


class _ChannelBatches(TargetBatches):
    """TargetBatches of images [N, C, H, W]."""

    def __getitems__(self, indices: Any) -> tuple[Tensor, Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long).to(self.images.device)
        x = self.images[index].float().div_(255.0)
        if self.normalize:
            x = x.sub_(self.mean).div_(self.std)
        y = self.targets[index]
        return x, y.long() if y.dtype == torch.uint8 else y


class SegmentFolderDataModule(TaskFiles):
    """``images/`` and ``masks/`` PNG folders: a mask per image, of its size, each pixel a class index.
    ``n_classes``: None takes the largest index found + 1 (255, void, aside)."""

    name = "segment_folder"
    target = "class_map"

    def __init__(self, *args: Any, n_classes: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if n_classes is not None and (not isinstance(n_classes, int) or not 2 <= n_classes <= VOID):
            raise ConfigError("data.n_classes", f"got {n_classes!r}", allowed=f"null or an integer in 2..{VOID}")
        self._n_classes = n_classes

    def _files(self) -> tuple[Tensor, Tensor, list[str]]:
        images_dir, masks_dir = self.root / "images", self.root / "masks"
        for folder in (images_dir, masks_dir):
            if not folder.is_dir():
                raise DataError(f"data.root: no folder {folder}: a segmentation folder holds images/ and masks/")
        paths = sorted(p for p in images_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not paths:
            raise DataError(f"data.root: {images_dir} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        images, masks = [], []
        for path in paths:
            mask_path = masks_dir / f"{path.stem}.png"
            if not mask_path.is_file():
                raise DataError(f"{path}: no mask {mask_path}: every image needs a mask PNG of the same name")
            images.append(self._image(path))
            masks.append(self._mask(mask_path, images[-1].shape[:2]))
        found = int(max(int(m[m != VOID].max(initial=0)) for m in masks)) + 1
        n_classes = self._n_classes or max(found, 2)
        for mask, path in zip(masks, paths):
            if int(mask[mask != VOID].max(initial=0)) >= n_classes:
                bad = int(mask[mask != VOID].max())
                raise DataError(f"{masks_dir / (path.stem + '.png')}: class index {bad} is out of range: "
                                f"data.n_classes is {n_classes} (indices 0..{n_classes - 1}, and {VOID} for void)")
        names = [str(k) for k in range(n_classes)]
        return self._stack(images, paths), torch.from_numpy(np.stack(masks)), names

    def _mask(self, path: Path, size: tuple[int, ...]) -> np.ndarray:
        try:
            with Image.open(path) as picture:
                if picture.mode not in ("P", "L", "I", "I;16"):
                    raise DataError(f"{path}: a {picture.mode} image; a mask is a palette or gray PNG of class "
                                    "indices, one per pixel")
                mask = np.array(picture)  # a palette PNG's pixels are its indices
        except (OSError, UnidentifiedImageError) as exc:
            raise DataError(f"{path}: not a readable PNG ({exc})") from None
        if mask.shape != tuple(size):
            raise DataError(f"{path}: the mask is {mask.shape[1]}x{mask.shape[0]} pixels, but its image is "
                            f"{size[1]}x{size[0]}: a mask must be of its image's size")
        if mask.max(initial=0) > VOID or mask.min(initial=0) < 0:
            raise DataError(f"{path}: class index {int(mask.max())} is out of range (0..{VOID - 1}, {VOID} void)")
        return mask.astype(np.uint8)


class ImageTableDataModule(TaskFiles):
    """A CSV of ``file,NAME,...`` rows (``csv``, in ``root``): an image and its numbers. All columns 0/1: labels
    (``target`` labels, task=multilabel); otherwise numbers (task=regress)."""

    name = "image_table"

    def __init__(self, *args: Any, csv: str = "targets.csv", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.csv = csv

    @property
    def target(self) -> str:
        targets = self._load()[1]
        return "labels" if bool(((targets == 0) | (targets == 1)).all()) else "numbers"

    def _files(self) -> tuple[Tensor, Tensor, list[str]]:
        table = self.root / self.csv
        try:
            with open(table, newline="", encoding="utf-8") as handle:
                rows = list(csv.reader(handle))
        except OSError as exc:
            raise DataError(f"data.csv: cannot read {table} ({exc.strerror or exc})") from None
        if len(rows) < 2 or len(rows[0]) < 2:
            raise DataError(f"{table}: expected a header file,NAME,... and a row per image")
        names, images, paths, values = [c.strip() for c in rows[0][1:]], [], [], []
        for line, row in enumerate(rows[1:], start=2):
            if not row:
                continue
            if len(row) != len(names) + 1:
                raise DataError(f"{table}:{line}: {len(row)} cells, but the header has {len(names) + 1}")
            path = self.root / row[0].strip()
            if not path.is_file():
                raise DataError(f"{table}:{line}: no file {path}")
            try:
                values.append([float(cell) for cell in row[1:]])
            except ValueError:
                bad = next(cell for cell in row[1:] if not _is_number(cell))
                raise DataError(f"{table}:{line}: {bad!r} is not a number ({path.name})") from None
            images.append(self._image(path))
            paths.append(path)
        return self._stack(images, paths), torch.tensor(values, dtype=torch.float32), names


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
