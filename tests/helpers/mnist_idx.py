"""Tiny, learnable MNIST-format files for tests: ``from tests.helpers.mnist_idx import write_mnist_idx``
(pytest puts the repo root on ``sys.path``, where ``tests`` is a namespace package).

Class k is a bright 5x5 square in cell k of a 3x4 grid over faint noise, so even a linear
model fits it in a few steps. The IDX writer here is independent of ``modelforge.data.idx``
on purpose: the reader is tested against a second implementation, not against itself.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import torch

from modelforge.data.idx import FILE_NAMES, SPLITS, IdxDataset


def idx_bytes(values: torch.Tensor, magic: int) -> bytes:
    """IDX encoding of a uint8 tensor: big-endian magic, one uint32 per dim, then the bytes."""
    dims = tuple(values.shape)
    return struct.pack(f">I{len(dims)}I", magic, *dims) + values.to(torch.uint8).contiguous().numpy().tobytes()


def write_idx(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path``, gzip-compressed when the name ends in ``.gz``."""
    path = Path(path)
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def pattern_images(labels: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """uint8 [N, 28, 28]: for label k, a 5x5 square of brightness 160..255 in grid cell k."""
    g = torch.Generator().manual_seed(seed)
    n = len(labels)
    images = torch.randint(0, 40, (n, 28, 28), generator=g, dtype=torch.uint8)  # faint noise
    brightness = torch.randint(160, 256, (n,), generator=g, dtype=torch.uint8)
    for i, k in enumerate(labels.tolist()):
        top, left = 1 + 7 * (k // 4), 1 + 7 * (k % 4)
        images[i, top:top + 5, left:left + 5] = brightness[i]
    return images


def known_set(directory: Path, contents: dict[str, bytes], name: str, *, gz: bool) -> IdxDataset:
    """Write ``contents`` (file name -> IDX bytes) and return them as a known data set: their md5s, no mirrors."""
    for file_name, data in contents.items():
        write_idx(directory / (file_name + (".gz" if gz else "")), data)
    md5s = tuple(hashlib.md5(contents[n]).hexdigest() for n in FILE_NAMES)
    return IdxDataset(name, name.title(), md5s, (), 0.5, 0.25, tuple(str(k) for k in range(10)))


def write_mnist_idx(directory: str | Path, n_train: int = 64, n_test: int = 32, *, gz: bool = True,
                    seed: int = 0) -> IdxDataset:
    """Write the four MNIST files (standard names) with ``n_train``/``n_test`` learnable images.

    Returns them as a known data set (``tiny``: their md5s), so that checks can run with
    ``verify=True``. Labels cycle through 0..9 in a seeded order.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed + 1)
    contents = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = (torch.arange(n) % 10)[torch.randperm(n, generator=g)]
        images = idx_bytes(pattern_images(labels, seed=seed + len(contents)), 2051)
        contents.update(zip(SPLITS[split], (images, idx_bytes(labels, 2049))))
    return known_set(directory, contents, "tiny", gz=gz)


def write_idx_set(directory: str | Path, n_train: int = 48, n_test: int = 24, *, n_classes: int = 5,
                  size: tuple[int, int] = (20, 20), seed: int = 7) -> IdxDataset:
    """A second data set with other contents: ``size`` images, ``n_classes`` classes, the standard names.

    Class k is a bright horizontal bar in band k over a dark background (not MNIST's squares),
    raw (not gzipped) files. Returns it as a known data set (``other``), as :func:`write_mnist_idx`.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    h, w = size
    band = h // n_classes
    contents = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = torch.randint(0, n_classes, (n,), generator=g)
        labels[:n_classes] = torch.arange(n_classes)  # every class present
        images = torch.randint(0, 30, (n, h, w), generator=g, dtype=torch.uint8)
        for i, k in enumerate(labels.tolist()):
            images[i, k * band:(k + 1) * band - 1, 2:w - 2] = 200
        contents.update(zip(SPLITS[split], (idx_bytes(images, 2051), idx_bytes(labels, 2049))))
    return known_set(directory, contents, "other", gz=False)

