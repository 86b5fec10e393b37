"""The tiny generated MNIST the training tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.mnist_idx import write_mnist_idx
from tests.helpers.run_config import TINY, compose_train, tiny_cli_args  # noqa: F401  moved; for branches written before


@pytest.fixture(scope="session")
def tiny_mnist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """160 train / 64 test learnable 28x28 images in the four standard IDX files."""
    folder = tmp_path_factory.mktemp("tiny_mnist")
    write_mnist_idx(folder, n_train=160, n_test=64)
    return folder
