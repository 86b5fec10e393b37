"""The small cnn the export and predict tests share, trained once per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.small_runs import (  # noqa: F401  moved; for branches written before
    HAS_ONNX, SMALL_CNN, needs_onnx, train_mlp, train_small_cnn)


@pytest.fixture(scope="session")
def small_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SMALL_CNN trained on tiny_data (tests/conftest.py), once per test process; the tests only read it."""
    return train_small_cnn(tiny_data, tmp_path_factory.mktemp("runs") / "small")
