"""A data directory that does not exist is never left behind by a failed run, from any working directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

UNREACHABLE = "http://127.0.0.1:9/"


def test_relative_data_path_from_elsewhere_fails_once_and_creates_nothing(run_main, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = tmp_path / "run"
    monkeypatch.setenv("MODELFORGE_DATA", "../shared/datasets/mnist")
    result = run_main("train", "trainer.max_epochs=1", f"data.mirrors=[{UNREACHABLE}]", f"hydra.run.dir={run_dir}",
                      cwd=elsewhere)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"MNIST files missing from data_dir {tmp_path / 'shared' / 'datasets' / 'mnist'}" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "run"]  # no ../shared/datasets/mnist
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["error"].startswith("DataError: MNIST files missing")
