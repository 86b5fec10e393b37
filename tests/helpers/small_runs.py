"""Small runs the export, predict and file-safety tests train, and whether ONNX can be exported here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from modelforge.train import train
from tests.helpers.run_config import compose_train

HAS_ONNX = all(importlib.util.find_spec(name) for name in ("onnx", "onnxscript", "onnxruntime"))
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="onnx, onnxscript and onnxruntime not installed "
                                                      "(pip install 'modelforge[export]')")

# A cnn whose export is a few KB.
SMALL_CNN = ("trainer.max_epochs=1", "model=cnn", "enc_sizes=[4]", "dec_sizes=[8]")


def train_mlp(data_dir: Path, run_dir: Path, hidden: int) -> Path:
    """One epoch of an mlp with one hidden layer of ``hidden`` units on ``data_dir`` into ``run_dir``."""
    train(compose_train(data_dir, "trainer.max_epochs=1", "model=mlp", f"model.hidden_sizes=[{hidden}]"),
          run_dir=run_dir)
    return run_dir


def train_small_cnn(data_dir: Path, run_dir: Path) -> Path:
    """One epoch of SMALL_CNN on ``data_dir`` into ``run_dir``."""
    train(compose_train(data_dir, *SMALL_CNN), run_dir=run_dir)
    return run_dir
