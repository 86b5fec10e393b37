"""MNIST-format data sets as a LightningDataModule that serves whole batches sliced from one uint8 tensor.

Each split stays one uint8 tensor, moved once to the training device in ``setup``; a batch is
one indexing op, then float conversion, optional shift augmentation and normalization on the
batch itself. No per-sample Python transform runs, and on a GPU no batch crosses PCIe.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from modelforge.data.datasets import KNOWN_DATASETS, MNIST, IdxDataset
from modelforge.data.mnist_files import (
    DOWNLOAD_TIMEOUT_S,
    MNIST_FILES,
    MnistFile,
    load_mnist,
)
from modelforge.data.shuffle import ResumableShuffle
from modelforge.errors import ConfigError, UnknownNameError

MNIST_MEAN = MNIST.mean
MNIST_STD = MNIST.std

# A batch here is one tensor slice, so Lightning's advice to add DataLoader workers is noise.
warnings.filterwarnings("ignore", message=r".*does not have many workers which may be a bottleneck")


def random_shift(images: Tensor, max_shift: int) -> Tensor:
    """Shift each image of ``images`` [B, H, W] by its own random (dy, dx) in [-max_shift, max_shift].

    Pixels shifted in are 0 (MNIST background). Vectorized: pad once, then one gather.
    Uses the global RNG of the images' device, so ``seed_everything`` makes it repeatable.
    """
    if max_shift <= 0:
        return images
    b, h, w = images.shape
    device = images.device
    padded = F.pad(images, (max_shift, max_shift, max_shift, max_shift))
    dy = torch.randint(0, 2 * max_shift + 1, (b, 1, 1), device=device)
    dx = torch.randint(0, 2 * max_shift + 1, (b, 1, 1), device=device)
    rows = dy + torch.arange(h, device=device).view(1, h, 1)
    cols = dx + torch.arange(w, device=device).view(1, 1, w)
    return padded[torch.arange(b, device=device).view(b, 1, 1), rows, cols]


class MnistBatches(Dataset):
    """Images uint8 [N, 28, 28] and labels int64 [N], fetched a batch at a time.

    The DataLoader calls ``__getitems__`` with a batch of indices, so a batch costs one
    indexing op; any sampler works, including the DistributedSampler Lightning injects.
    """

    def __init__(self, images: Tensor, labels: Tensor, *, augment_shift: int = 0, normalize: bool = True,
                 mean: float = MNIST_MEAN, std: float = MNIST_STD) -> None:
        self.images = images
        self.labels = labels
        self.augment_shift = augment_shift
        self.normalize = normalize
        self.mean = mean
        self.std = std

    def __len__(self) -> int:
        return len(self.labels)

    def __getitems__(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long)
        if self.images.is_cuda:
            # A plain copy to the GPU waits for all the GPU's queued work (the previous step) before
            # it returns; from pinned memory, non_blocking, it is queued behind that work instead.
            index = index.pin_memory().to(self.images.device, non_blocking=True)
        else:
            index = index.to(self.images.device)
        images = random_shift(self.images[index], self.augment_shift)
        x = images.unsqueeze(1).float().div_(255.0)
        if self.normalize:
            x = x.sub_(self.mean).div_(self.std)
        return x, self.labels[index]

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        x, y = self.__getitems__([i])
        return x[0], y[0]

    def to(self, device: torch.device) -> MnistBatches:
        """Move the data to ``device`` in place (no-op when already there)."""
        self.images, self.labels = self.images.to(device), self.labels.to(device)
        return self


def _batch_as_is(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """collate_fn: ``__getitems__`` already returns a collated batch (module-level: picklable)."""
    return batch


class IdxDataModule(pl.LightningDataModule):
    """MNIST, Fashion-MNIST or any folder of four IDX files: train/val/test with a seeded split.

    Batches are ``(images float32 [B, 1, H, W], labels int64 [B])``.

    Args:
        dataset: a known data set (``mnist``, ``fashion_mnist``: file checks, mirrors, stats),
            or None for any folder of the four IDX files with the standard names (no checksums,
            no download; stats computed from the training images unless given).
        data_dir: folder with the four IDX files (.gz or raw); None: ``$MODELFORGE_DATA`` for
            MNIST, else ``~/.cache/modelforge/<dataset>`` (see :func:`resolve_data_dir`).
        batch_size: training batch size; ``eval_batch_size`` (default: the same) for val/test.
        val_size: images held out of the 60,000 training images: a count, or a fraction in (0, 1).
        seed: seeds the train/val split only; shuffling and augmentation follow the global seed.
        num_workers: DataLoader workers; only used while the data sits on the CPU, since a batch
            is a single slice and workers cannot share a GPU tensor.
        augment_shift: largest random shift in pixels applied to training batches; 0 turns it off.
        normalize: subtract ``mean`` and divide by ``std`` after scaling to [0, 1].
        mean, std: normalization stats; None: the data set's known ones (computed for ``idx``).
        n_classes: None: the data set's (for ``idx``: the largest training label + 1).
        download: fetch missing files from ``mirrors`` (default: the data set's public mirrors),
            waiting at most ``timeout`` seconds for each connection.
        verify: check each file's size and md5 against the known ones (header checks always run).
        cache_decoded: keep a gunzipped copy of each ``.gz`` file in ``~/.cache/modelforge/decoded``
            (named by checksums, see :mod:`modelforge.data.decoded_cache`): later runs skip the gunzip.
        files: the file table (names, sizes, md5s) to check against; for tests with small files.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        dataset: str | None = "mnist",
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        val_size: int | float = 5000,
        seed: int = 0,
        num_workers: int = 0,
        augment_shift: int = 0,
        normalize: bool = True,
        mean: float | None = None,
        std: float | None = None,
        n_classes: int | None = None,
        download: bool = True,
        verify: bool = True,
        cache_decoded: bool = True,
        mirrors: Sequence[str] | None = None,
        files: Sequence[MnistFile] | None = None,
        timeout: float = DOWNLOAD_TIMEOUT_S,
    ) -> None:
        super().__init__()
        _check_int("batch_size", batch_size, low=1)
        if eval_batch_size is not None:
            _check_int("eval_batch_size", eval_batch_size, low=1)
        _check_int("num_workers", num_workers, low=0)
        _check_int("augment_shift", augment_shift, low=0, high=27)
        _check_val_size(val_size)
        _check_mirrors(mirrors)
        if dataset is not None and dataset not in KNOWN_DATASETS:
            raise UnknownNameError("IDX data set", dataset, KNOWN_DATASETS, path="data.dataset")
        if n_classes is not None:
            _check_int("n_classes", n_classes, low=2)
        for key, value in (("mean", mean), ("std", std)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ConfigError(f"data.{key}", f"got {value!r}", allowed="a number or null (the data set's)")
        if std is not None and std <= 0:
            raise ConfigError("data.std", f"got {std}", allowed="a number > 0")
        if dataset is None and data_dir in (None, ""):
            raise ConfigError("data.data_dir", "missing: the folder that holds the four IDX files",
                              hint="data=idx data.data_dir=/path/to/folder (train-images-idx3-ubyte[.gz], ...)")
        self.spec: IdxDataset | None = KNOWN_DATASETS[dataset] if dataset is not None else None
        self.name = dataset or "idx"
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.val_size = val_size
        self.seed = seed
        self.num_workers = num_workers
        self.augment_shift = augment_shift
        self.normalize = normalize
        self.mean, self.std, self._n_classes = mean, std, n_classes
        # A folder of unknown IDX files has nothing to check against and nowhere to fetch from.
        self.download = download and self.spec is not None
        self.verify = verify and self.spec is not None
        self.cache_decoded = cache_decoded
        # Hydra hands over ListConfig; a plain tuple keeps the module picklable and printable.
        default_mirrors = self.spec.mirrors if self.spec is not None else ()
        self.mirrors = tuple(str(m) for m in mirrors) if mirrors is not None else default_mirrors
        default_files = self.spec.files if self.spec is not None else MNIST_FILES
        self.files = tuple(files) if files is not None else default_files
        self.timeout = timeout
        self.train_set: MnistBatches | None = None
        self.val_set: MnistBatches | None = None
        self.test_set: MnistBatches | None = None
        self.train_sampler: ResumableShuffle | None = None
        self._resume_at: tuple[int, int, int] | None = None

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of one image, as the model must take it."""
        if self.spec is not None:
            return (1, *self.spec.image_size)
        return (1, *self._load()["train"][0].shape[1:])

    @property
    def n_classes(self) -> int:
        if self._n_classes is not None:
            return self._n_classes
        if self.spec is not None:
            return self.spec.n_classes
        return int(self._load()["train"][1].max()) + 1

    @property
    def class_names(self) -> tuple[str, ...]:
        return self.spec.classes if self.spec is not None else tuple(str(k) for k in range(self.n_classes))

    def normalization(self) -> tuple[float, float]:
        """(mean, std): given, else the data set's, else computed from the training images."""
        if self.mean is not None and self.std is not None:
            return float(self.mean), float(self.std)
        if self.spec is not None:
            known = (self.spec.mean, self.spec.std)
        else:
            pixels = self._load()["train"][0].float().div_(255.0)
            known = (float(pixels.mean()), float(pixels.std()))
        return (float(self.mean) if self.mean is not None else known[0],
                float(self.std) if self.std is not None else known[1])

    def check(self) -> dict[str, int]:
        """Download what is missing and run every file check now; returns the split sizes.

        Call before training so a bad ``data_dir`` fails in seconds, not after the model is built.
        """
        splits = self._load()
        n_train = len(splits["train"][1])
        n_val = self._val_count(n_train)
        return {"train": n_train - n_val, "val": n_val, "test": len(splits["test"][1])}

    def prepare_data(self) -> None:
        # Lightning calls this on one process per node: the place for downloads.
        self.check()

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            splits = self._load()
            images, labels = splits["train"]
            n_val = self._val_count(len(labels))
            order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(self.seed))
            val_idx, train_idx = order[:n_val], order[n_val:]
            mean, std = self.normalization() if self.normalize else (0.0, 1.0)
            common = dict(normalize=self.normalize, mean=mean, std=std)
            self.train_set = MnistBatches(images[train_idx], labels[train_idx],
                                          augment_shift=self.augment_shift, **common)
            self.val_set = MnistBatches(images[val_idx], labels[val_idx], **common)
            self.test_set = MnistBatches(*splits["test"], **common)
        # Each DDP rank moves the data to its own device; 55 MB of uint8 fits any GPU.
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        for dataset in (self.train_set, self.val_set, self.test_set):
            dataset.to(device)

    def train_dataloader(self) -> DataLoader:
        dataset = self._ready(self.train_set)
        if getattr(self.trainer, "world_size", 1) > 1:
            # Lightning swaps in a DistributedSampler (shuffling, seeded per epoch) under DDP.
            return self._loader(dataset, self.batch_size, shuffle=True)
        # Shuffled by a sampler whose position a checkpoint keeps (modelforge.train.checkpoints);
        # its seed comes from the global seed (`seed=`), which makes the order repeatable.
        self.train_sampler = ResumableShuffle(len(dataset), seed=torch.initial_seed() % 2**62)
        if self._resume_at is not None:
            self.train_sampler.resume(*self._resume_at)
        workers = self.num_workers if dataset.images.device.type == "cpu" else 0
        # A generator of its own: creating the iterator then draws nothing from the global RNG.
        return DataLoader(dataset, batch_size=self.batch_size, sampler=self.train_sampler, num_workers=workers,
                          collate_fn=_batch_as_is, persistent_workers=workers > 0,
                          generator=torch.Generator().manual_seed(self.train_sampler.seed))

    def resume_shuffle(self, seed: int, epoch: int, skip: int) -> None:
        """Continue a checkpoint's batch order: ``seed``'s order at ``epoch``, less its first ``skip`` samples."""
        self._resume_at = (seed, epoch, skip)
        if self.train_sampler is not None:
            self.train_sampler.resume(seed, epoch, skip)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._ready(self.val_set), self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._ready(self.test_set), self.eval_batch_size, shuffle=False)

    def _loader(self, dataset: MnistBatches, batch_size: int, *, shuffle: bool) -> DataLoader:
        workers = self.num_workers if dataset.images.device.type == "cpu" else 0
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=workers,
                          collate_fn=_batch_as_is, persistent_workers=workers > 0)

    def _load(self) -> dict[str, tuple[Tensor, Tensor]]:
        # Decoded once per process (see mnist_files._decode): prepare_data, setup and test share it.
        return load_mnist(self.data_dir, download=self.download, verify=self.verify,
                          mirrors=self.mirrors, files=self.files, timeout=self.timeout,
                          image_size=self.spec.image_size if self.spec is not None else None,
                          n_classes=self._n_classes or (self.spec.n_classes if self.spec is not None else None),
                          cache=self.cache_decoded)

    def _val_count(self, n_train: int) -> int:
        count = round(self.val_size * n_train) if isinstance(self.val_size, float) else self.val_size
        if not 1 <= count < n_train:
            raise ConfigError("data.val_size", f"{self.val_size} holds out {count} of the {n_train} "
                              "training images, leaving no training or no validation set",
                              allowed=f"a count in 1..{n_train - 1} or a fraction in (0, 1)")
        return count

    @staticmethod
    def _ready(dataset: MnistBatches | None) -> MnistBatches:
        if dataset is None:
            raise RuntimeError("IdxDataModule.setup() must run before asking for a dataloader")
        return dataset


# The name modelforge has always exported; MNIST is the default data set.
MNISTDataModule = IdxDataModule


def _check_int(name: str, value: object, *, low: int, high: int | None = None) -> None:
    # bool is an int subclass; `batch_size: true` in YAML is a mistake, not 1.
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        allowed = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
        raise ConfigError(f"data.{name}", f"got {value!r}", allowed=allowed)


def _check_mirrors(mirrors: object) -> None:
    # A bare string would be iterated letter by letter as a list of "mirrors".
    if mirrors is None:
        return
    if isinstance(mirrors, (str, bytes)) or not isinstance(mirrors, Sequence):
        raise ConfigError("data.mirrors", f"got {mirrors!r}", allowed="null or a list of URLs",
                          hint="data.mirrors=[https://example.org/mnist/]")
    for url in mirrors:
        if not str(url).startswith(("http://", "https://", "file:")):
            raise ConfigError("data.mirrors", f"{url!r} is not a URL", allowed="http://, https:// or file: URLs")


def _check_val_size(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError("data.val_size", f"got {value!r}", allowed="a count (int) or a fraction in (0, 1)")
    if isinstance(value, int) and value < 1:
        raise ConfigError("data.val_size", f"got {value}; validation needs at least one image",
                          allowed="a count (int) >= 1 or a fraction in (0, 1)")
    if isinstance(value, float) and not 0.0 < value < 1.0:
        raise ConfigError("data.val_size", f"fraction {value} is outside (0, 1)",
                          allowed="a count (int) or a fraction in (0, 1)")
