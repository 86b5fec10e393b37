"""IDX data sets as a LightningDataModule that serves whole batches sliced from one uint8 tensor.

Each split stays one uint8 tensor, moved once to the training device in ``setup``; a batch is one indexing op,
then float conversion, shift augmentation and normalization: no per-sample Python transform, and on a GPU no
batch crosses PCIe. Training order and evaluation under DDP: :mod:`modelforge.data.split_loaders`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from modelforge.data.download import ensure_files, resolve_data_dir
from modelforge.data.idx import FASHION_MNIST, MNIST, IdxDataset, load_idx_set
from modelforge.data.options import IdxOptions
from modelforge.data.split_loaders import SplitLoaders
from modelforge.errors import ConfigError

# A batch here is one tensor slice, so Lightning's advice to add DataLoader workers is noise.
warnings.filterwarnings("ignore", message=r".*does not have many workers which may be a bottleneck")


def random_shift(images: Tensor, max_shift: int) -> Tensor:
    """Shift each image of ``images`` [B, H, W] by its own random (dy, dx) in [-max_shift, max_shift].
    Pixels shifted in are 0 (the background). The device's global RNG: ``seed_everything`` repeats it."""
    if max_shift <= 0:
        return images
    (b, h, w), device = images.shape, images.device
    padded = F.pad(images, (max_shift, max_shift, max_shift, max_shift))
    dy, dx = (torch.randint(0, 2 * max_shift + 1, (b, 1, 1), device=device) for _ in "yx")
    rows = dy + torch.arange(h, device=device).view(1, h, 1)
    cols = dx + torch.arange(w, device=device).view(1, 1, w)
    return padded[torch.arange(b, device=device).view(b, 1, 1), rows, cols]


class MnistBatches(Dataset):
    """Images uint8 [N, H, W] and labels int64 [N], fetched a batch at a time: the DataLoader calls
    ``__getitems__`` with a batch of indices (one indexing op); any sampler works, DistributedSampler too."""

    def __init__(self, images: Tensor, labels: Tensor, *, augment_shift: int = 0, normalize: bool = True,
                 mean: float = MNIST.mean, std: float = MNIST.std) -> None:
        self.images, self.labels = images, labels
        self.augment_shift, self.normalize, self.mean, self.std = augment_shift, normalize, mean, std

    def __len__(self) -> int:
        return len(self.labels)

    def __getitems__(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        index, device = torch.as_tensor(indices, dtype=torch.long), self.images.device
        # A plain copy to the GPU waits for all its queued work (the previous step); from pinned
        # memory, non_blocking, it is queued behind that work instead.
        index = index.pin_memory().to(device, non_blocking=True) if self.images.is_cuda else index.to(device)
        x = random_shift(self.images[index], self.augment_shift).unsqueeze(1).float().div_(255.0)
        if self.normalize:
            x = x.sub_(self.mean).div_(self.std)
        return x, self.labels[index]

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        x, y = self.__getitems__([i])
        return x[0], y[0]

    def to(self, device: torch.device) -> MnistBatches:
        self.images, self.labels = self.images.to(device), self.labels.to(device)
        return self


def _batch_as_is(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:  # collate_fn, picklable
    return batch  # ``__getitems__`` already returns a collated batch


class IdxDataModule(SplitLoaders, IdxOptions, pl.LightningDataModule):
    """Any folder of the four IDX files: no checksums, no download; shapes, classes and stats from the files.
    Batches are ``(images float32 [B, 1, H, W], labels int64 [B])``. A known data set's subclass sets
    ``dataset`` (checksums, mirrors, stats, classes). Options: :class:`~modelforge.data.options.IdxOptions`."""

    dataset: IdxDataset | None = None

    _splits: dict[str, tuple[Tensor, Tensor]] | None = None  # prepare_data, setup and test share one read
    # eval: the test images alone; the training images are not split, so val_size (another data set's, the run's)
    # is not checked against a count it does not apply to
    tests_only: bool = False

    @property
    def name(self) -> str:
        return self.dataset.name if self.dataset is not None else "idx"

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of one image, as the model must take it."""
        return (1, *(self.dataset.image_size if self.dataset is not None else self._load()["train"][0].shape[1:]))

    @property
    def n_classes(self) -> int:
        if self._n_classes is not None:
            return self._n_classes
        return len(self.dataset.classes) if self.dataset is not None else int(self._load()["train"][1].max()) + 1

    @property
    def class_names(self) -> tuple[str, ...]:
        return self.dataset.classes if self.dataset is not None else tuple(str(k) for k in range(self.n_classes))

    def normalization(self) -> tuple[float, float]:
        """(mean, std): given, else the data set's, else computed from the training images."""
        known = (self.dataset.mean, self.dataset.std) if self.dataset is not None else (self.mean, self.std)
        if None in known:
            pixels = self._load()["train"][0].float().div_(255.0)
            known = (float(pixels.mean()), float(pixels.std()))
        return (float(known[0] if self.mean is None else self.mean), float(known[1] if self.std is None else self.std))

    def check(self) -> dict[str, int]:
        """Fetch what is missing and run every file check now (seconds, not after the model is built); split sizes."""
        n_train = len(self._load()["train"][1])
        if self.tests_only:
            return {"test": len(self._load()["test"][1])}
        n_val = self._val_count(n_train)
        return {"train": n_train - n_val, "val": n_val, "test": len(self._load()["test"][1])}

    def prepare_data(self) -> None:
        self.check()  # Lightning calls this on one process per node: the place for downloads

    def setup(self, stage: str | None = None) -> None:
        if self.tests_only and self.test_set is None:
            mean, std = self.normalization() if self.normalize else (0.0, 1.0)
            self.test_set = MnistBatches(*self._load()["test"], normalize=self.normalize, mean=mean, std=std)
        elif self.train_set is None:
            images, labels = self._load()["train"]
            order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(self.seed))
            val_idx, train_idx = order.tensor_split([self._val_count(len(labels))])
            mean, std = self.normalization() if self.normalize else (0.0, 1.0)
            common = dict(normalize=self.normalize, mean=mean, std=std)
            self.train_set = MnistBatches(images[train_idx], labels[train_idx], augment_shift=self.augment_shift, **common)
            self.val_set = MnistBatches(images[val_idx], labels[val_idx], **common)
            self.test_set = MnistBatches(*self._load()["test"], **common)
        # Each DDP rank moves the data to its own device; 55 MB of uint8 fits any GPU.
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        for dataset in (self.train_set, self.val_set, self.test_set):
            if dataset is not None:  # eval's tests_only: no training split
                dataset.to(device)

    def _loader(self, dataset: MnistBatches, batch_size: int, **kwargs: Any) -> DataLoader:
        workers = self.num_workers if dataset.images.device.type == "cpu" else 0  # workers cannot share a GPU tensor
        return DataLoader(dataset, batch_size=batch_size, num_workers=workers, collate_fn=_batch_as_is,
                          persistent_workers=workers > 0, **kwargs)

    def _load(self) -> dict[str, tuple[Tensor, Tensor]]:
        if self._splits is None:
            root = resolve_data_dir(self.data_dir, self.dataset.name if self.dataset is not None else self.name)
            paths = ensure_files(root, self.dataset, download=self.download, mirrors=self.mirrors, timeout=self.timeout)
            self._splits = load_idx_set(paths, self.dataset, verify=self.verify, n_classes=self._n_classes)
        return self._splits

    def _val_count(self, n_train: int) -> int:
        count = round(self.val_size * n_train) if isinstance(self.val_size, float) else self.val_size
        if not 1 <= count < n_train:
            raise ConfigError("data.val_size", f"{self.val_size} holds out {count} of the {n_train} "
                              "training images, leaving no training or no validation set",
                              allowed=f"a count in 1..{n_train - 1} or a fraction in (0, 1)")
        return count


class MNISTDataModule(IdxDataModule):
    """MNIST digits (IDX files, checked, downloaded)."""
    dataset = MNIST


class FashionMNISTDataModule(IdxDataModule):
    """Fashion-MNIST clothing (IDX files, checked, downloaded)."""
    dataset = FASHION_MNIST

