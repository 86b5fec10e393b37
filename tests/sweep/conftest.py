"""Tiny generated MNIST and a runner for `python -m modelforge train` sweeps on it."""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.data_helpers import write_mnist_idx


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_mnist_sweep")
    write_mnist_idx(folder, n_train=64, n_test=32)
    return folder


@pytest.fixture
def tiny_args(tiny_data: Path) -> list[str]:
    """Overrides that train on the tiny data, quietly."""
    return [f"data.data_dir={tiny_data}", "data.verify=false", "data.download=false", "data.val_size=16",
            "data.batch_size=16", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]


def read_summary(sweep_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((sweep_dir / "summary.csv").open()))


@pytest.fixture
def sweep(cli, tmp_path: Path, tiny_args: list[str]) -> Callable[..., subprocess.CompletedProcess]:
    """Run `train -m ARGS` on tiny data into tmp_path/sweep, from tmp_path (nothing lands in the repo)."""

    def run(*args: str, sweep_dir: Path | None = None) -> subprocess.CompletedProcess:
        target = sweep_dir or tmp_path / "sweep"
        return cli("train", "-m", *args, *tiny_args, f"hydra.sweep.dir={target}", cwd=tmp_path)

    return run


@pytest.fixture
def sweep_here(run_main, tmp_path: Path, tiny_args: list[str]) -> Callable[..., Any]:
    """`train -m ARGS` as :func:`sweep` does, in this process (Hydra's basic launcher runs jobs here anyway)."""

    def run(*args: str, sweep_dir: Path | None = None) -> Any:
        target = sweep_dir or tmp_path / "sweep"
        return run_main("train", "-m", *args, *tiny_args, f"hydra.sweep.dir={target}", cwd=tmp_path)

    return run
