"""The known IDX data sets: their files, checksums, mirrors, statistics and class names.

Lightning-free, so a checksum mismatch can name the data set a file belongs to
(``this is Fashion-MNIST: use data=fashion_mnist``) without loading the training stack.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelforge.data.mnist_files import (
    MIRRORS,
    MNIST_FILES,
    MnistFile,
    register_known_files,
)


@dataclass(frozen=True)
class IdxDataset:
    """A data set of four IDX files, as one ``data=<name>`` option serves it."""

    name: str  # the data option and DATAMODULES name
    title: str  # as people write it
    files: tuple[MnistFile, ...]
    mirrors: tuple[str, ...]
    mean: float  # of the training images scaled to [0, 1]
    std: float
    classes: tuple[str, ...]
    image_size: tuple[int, int] = (28, 28)

    @property
    def n_classes(self) -> int:
        return len(self.classes)


def _files(dataset: str, title: str, sizes_md5s: tuple[tuple[int, str], ...]) -> tuple[MnistFile, ...]:
    return tuple(MnistFile(spec.name, spec.split, spec.kind, size, md5, dataset, title)
                 for spec, (size, md5) in zip(MNIST_FILES, sizes_md5s, strict=True))


MNIST = IdxDataset(
    name="mnist", title="MNIST", files=MNIST_FILES, mirrors=MIRRORS,
    mean=0.1307, std=0.3081, classes=tuple(str(d) for d in range(10)),
)

# md5s of the uncompressed files, and mean/std of the 60,000 training images, measured on
# Debian's dataset-fashion-mnist package (the upstream release of 2017).
FASHION_MNIST = IdxDataset(
    name="fashion_mnist",
    title="Fashion-MNIST",
    files=_files("fashion_mnist", "Fashion-MNIST", (
        (47040016, "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
        (60008, "9018921c3c673c538a1fc5bad174d6f9"),
        (7840016, "8181f5470baa50b63fa0f6fddb340f0a"),
        (10008, "15d484375f8d13e6eb1aabb0c3f46965"),
    )),
    mirrors=(
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/",
    ),
    mean=0.2860,
    std=0.3530,
    classes=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
             "Ankle boot"),
)

KNOWN_DATASETS: dict[str, IdxDataset] = {d.name: d for d in (MNIST, FASHION_MNIST)}
register_known_files(FASHION_MNIST.files)
