"""IDX files, the format MNIST ships in: reading and checking them, and the data sets modelforge knows.

An IDX file is a magic number (0, 0, type code, number of dims), one big-endian uint32 per dim,
then the values: for MNIST, unsigned bytes (magic 2051 for images [N, H, W], 2049 for labels [N]).
"""

from __future__ import annotations

import gzip
import hashlib
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from modelforge.errors import DataError

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049
# The four files of a data set (each .gz or uncompressed): split -> (images, labels).
SPLITS = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
FILE_NAMES = (*SPLITS["train"], *SPLITS["test"])


@dataclass(frozen=True)
class IdxDataset:
    """A known data set of the four files: their checksums, where to fetch them, stats and classes."""

    name: str  # the data option (data=<name>)
    title: str  # as people write it
    md5s: tuple[str, ...]  # of each file's uncompressed bytes (FILE_NAMES order): .gz and raw copies alike
    mirrors: tuple[str, ...]  # each serves <mirror><file name>.gz
    mean: float  # of the training images scaled to [0, 1]
    std: float
    classes: tuple[str, ...]
    image_size: tuple[int, int] = (28, 28)


MNIST = IdxDataset(
    "mnist", "MNIST",
    ("6bbc9ace898e44ae57da46a324031adb", "a25bea736e30d166cdddb491f175f624",
     "2646ac647ad5339dbf082846283269ea", "27ae3e4e09519cfbb04c329615203637"),
    ("https://ossci-datasets.s3.amazonaws.com/mnist/", "https://storage.googleapis.com/cvdf-datasets/mnist/"),
    0.1307, 0.3081, tuple("0123456789"))
# md5s and stats measured on Debian's dataset-fashion-mnist package (the upstream release of 2017).
FASHION_MNIST = IdxDataset(
    "fashion_mnist", "Fashion-MNIST",
    ("f4a8712d7a061bf5bd6d2ca38dc4d50a", "9018921c3c673c538a1fc5bad174d6f9",
     "8181f5470baa50b63fa0f6fddb340f0a", "15d484375f8d13e6eb1aabb0c3f46965"),
    ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
     "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/"),
    0.2860, 0.3530,
    ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"))
# Every known set, so that a file of one read as another says which it is.
KNOWN_DATASETS: dict[str, IdxDataset] = {d.name: d for d in (MNIST, FASHION_MNIST)}


def read_idx_bytes(path: str | Path) -> bytes:
    """The uncompressed bytes of ``path``: gunzipped when its name ends in ``.gz``."""
    path = Path(path)
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if path.suffix == ".gz" else data
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:  # cut off, or not gzip at all
        raise DataError(f"{path}: corrupt gzip ({e}); delete it so that it can be fetched again") from e
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e})") from e


def parse_idx(data: bytes, *, magic: int, where: str = "IDX data") -> torch.Tensor:
    """The uint8 tensor in ``data``; a DataError naming ``where`` for a wrong magic number or length."""
    found, header = int.from_bytes(data[:4], "big"), 4 + 4 * (magic & 0xFF)
    if len(data) >= 4 and found != magic:
        kind = {IMAGES_MAGIC: "images", LABELS_MAGIC: "labels"}.get(magic, f"magic-{magic}")
        raise DataError(f"{where}: wrong magic number {found} (0x{found:08x}), expected {magic} "
                        f"(0x{magic:08x}); this is not an MNIST {kind} file")
    if len(data) < header:
        raise DataError(f"{where}: truncated: {len(data)} bytes, too short for an IDX header of {header}")
    dims = [int.from_bytes(data[i:i + 4], "big") for i in range(4, header, 4)]
    expected = header + math.prod(dims)
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "too long"
        raise DataError(f"{where}: {what}: expected {expected} bytes for dims {dims}, found {len(data)}; "
                        "delete it so that it can be fetched again")
    if expected == header:  # torch.frombuffer refuses an empty buffer
        return torch.empty(dims, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=header).view(dims)


def read_idx(path: str | Path) -> torch.Tensor:
    """The uint8 tensor of one IDX file of unsigned bytes, ``.gz`` or not: MNIST's images ``[N, H, W]`` or
    labels ``[N]``. Header and length are checked (a :class:`~modelforge.errors.DataError` says what is wrong);
    no Lightning, no checksums. ``read_idx("train-images-idx3-ubyte.gz").float() / 255`` is a batch of images."""
    data = read_idx_bytes(path)
    if data[:3] != b"\x00\x00\x08":  # zero, zero, type code 8 (unsigned byte), then the number of dims
        raise DataError(f"{path}: not an IDX file of unsigned bytes: it starts {data[:4].hex() or 'empty'}, "
                        "expected 000008 and the number of dims (MNIST's images 00000803, labels 00000801)")
    return parse_idx(data, magic=int.from_bytes(data[:4], "big"), where=str(path))


def read_checked(path: Path, name: str, dataset: IdxDataset | None, *, verify: bool = True) -> torch.Tensor:
    """The tensor in ``path``, the file ``name`` of ``dataset``: header always checked, md5 if ``verify``."""
    data = read_idx_bytes(path)
    tensor = parse_idx(data, magic=IMAGES_MAGIC if "images" in name else LABELS_MAGIC, where=str(path))
    if verify and dataset is not None:
        digest, expected = hashlib.md5(data, usedforsecurity=False).hexdigest(), dataset.md5s[FILE_NAMES.index(name)]
        if digest != expected:
            raise DataError(f"{path}: checksum mismatch: md5 of the uncompressed bytes is {digest}, expected "
                            f"{expected}; the file is damaged or not the original {dataset.title}"
                            + _identify(digest, dataset))
    return tensor


def _identify(digest: str, expected: IdxDataset) -> str:
    for other in KNOWN_DATASETS.values():
        if other.name != expected.name and digest in other.md5s:
            return f"\n  this is {other.title}: use data={other.name}"
    return ("\n  hint: for a data set of your own in IDX format (checksums off, stats computed), use "
            "data=idx data.data_dir=DIR; data.verify=false skips the checks for this one")


def load_idx_set(paths: Mapping[str, Path], dataset: IdxDataset | None, *, verify: bool = True,
                 n_classes: int | None = None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{"train" | "test": (images uint8 [N, H, W], labels int64 [N])}`` from the four files in ``paths``.

    Checked: headers, ``dataset``'s md5s (if ``verify``) and image size, matching counts, labels < ``n_classes``.
    """
    n_classes = n_classes or (len(dataset.classes) if dataset is not None else None)
    splits = {}
    for split, (images_name, labels_name) in SPLITS.items():
        images_at, labels_at = paths[images_name], paths[labels_name]
        images = read_checked(images_at, images_name, dataset, verify=verify)
        labels = read_checked(labels_at, labels_name, dataset, verify=verify)
        if dataset is not None and tuple(images.shape[1:]) != dataset.image_size:
            raise DataError(f"{images_at}: images are {list(images.shape[1:])} pixels, "
                            f"expected {dataset.image_size[0]}x{dataset.image_size[1]}")
        if len(images) != len(labels):
            raise DataError(f"{images_at} holds {len(images)} images but {labels_at} holds {len(labels)} "
                            "labels; they must match")
        if n_classes is not None and len(labels) and int(labels.max()) >= n_classes:
            raise DataError(f"{labels_at}: labels must be in 0..{n_classes - 1}, found {int(labels.max())}")
        splits[split] = (images, labels.long())
    return splits
