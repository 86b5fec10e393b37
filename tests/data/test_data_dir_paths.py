"""A data directory that does not exist is never left behind by a failed run, from any working directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelforge.data.mnist_files import ensure_files
from modelforge.errors import DataError

UNREACHABLE = "http://127.0.0.1:9/"


def test_failed_download_removes_the_folders_it_made(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    with pytest.raises(DataError, match="MNIST files missing from data_dir"):
        ensure_files(tmp_path / "kept" / "a" / "mnist", mirrors=[UNREACHABLE], timeout=2)
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"] and not list((tmp_path / "kept").iterdir())


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
