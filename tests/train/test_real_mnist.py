"""Slow: the acceptance run on the real MNIST files (skips when they are not on this machine)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REAL_MNIST

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (REAL_MNIST / "train-images-idx3-ubyte.gz").is_file(),
                       reason=f"real MNIST not found at {REAL_MNIST} (set MODELFORGE_REAL_MNIST)"),
]


def test_one_epoch_cnn_reaches_98_percent_and_eval_reproduces_it(cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {"MODELFORGE_DATA": str(REAL_MNIST)}
    result = cli("train", "model=cnn", "enc_sizes=[32,64]", "trainer.max_epochs=1", f"hydra.run.dir={run_dir}",
                 "trainer.enable_progress_bar=false", env=env, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test/acc"] >= 0.98 and metrics["epochs"] == 1
    evaluated = cli("eval", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"hydra.run.dir={tmp_path / 'eval'}",
                    "trainer.enable_progress_bar=false", env=env, timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    reported = float(re.search(r"test/acc\s+([0-9.]+)", evaluated.stdout).group(1))
    assert reported == pytest.approx(metrics["test/acc"], abs=1e-3)
