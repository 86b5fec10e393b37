"""Shared fixtures: the repo root and a runner for `python -m modelforge` subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REAL_MNIST = Path(os.environ.get("MODELFORGE_REAL_MNIST", REPO.parent / "shared" / "datasets" / "mnist"))


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m modelforge ARGS` as a user would; returns the finished process."""
    full_env = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}
    full_env.pop("PYTEST_CURRENT_TEST", None)
    return subprocess.run([sys.executable, "-m", "modelforge", *args], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli
