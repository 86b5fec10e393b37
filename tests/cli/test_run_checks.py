"""`train` checks the whole run config and the run directory before Hydra creates that directory."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize(("arg", "message"), [
    ("trainer.max_epochs=abc", "error: trainer.max_epochs: expected int or null, got str 'abc'\n"),
    ("trainer.precision=bf17", "error: trainer.precision: expected 64 | 32 | 16 or 'transformer-engine'"),
    ("trainer.fast_dev_run=yes", "error: trainer.fast_dev_run: expected int or bool, got str 'yes'"),
    ("seed=abc", "error: seed: expected int or null, got str 'abc'\n"),
    ("label_smoothing=2", "error: label_smoothing: must be in [0, 1), got 2.0\n"),
    ("monitor=val/nope", "error: monitor: unknown metric 'val/nope'\n  did you mean 'val/loss'?\n"
                         "  allowed: val/acc, val/loss"),
    ("ckpt_path=/nonexistent/last.ckpt", "error: ckpt_path: no checkpoint file at /nonexistent/last.ckpt"),
    ("optim.lr=-1", "error: optim.lr: must be positive, got -1"),
])
def test_bad_value_is_refused_before_any_directory_is_made(run_main, tmp_path: Path, arg: str, message: str) -> None:
    result = run_main("train", arg, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # not even Hydra's outputs/train/DATE/TIME


def test_run_dir_that_cannot_be_made_is_one_message(run_main, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    result = run_main("train", f"hydra.run.dir={tmp_path / 'file' / 'run'}")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: hydra.run.dir: cannot write the run directory {tmp_path / 'file' / 'run'}: "
                                    f"{tmp_path / 'file'} is a file, not a folder\n")
    assert "Traceback" not in result.stderr
