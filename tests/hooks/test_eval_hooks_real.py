"""Slow: the hooks acceptance on real MNIST: ablation to chance, and eval without hooks reproducing the run."""

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


def test_ablating_encoder_1_drops_to_chance_and_grad_cam_draws(cli, tmp_path: Path) -> None:
    env = {"MODELFORGE_DATA": str(REAL_MNIST)}
    quiet = "trainer.enable_progress_bar=false"
    run = tmp_path / "run"
    trained = cli("train", "experiment=fast", "trainer.limit_train_batches=300", f"hydra.run.dir={run}", quiet,
                  env=env, timeout=1200)
    assert trained.returncode == 0, trained.stderr[-3000:]
    ckpt = f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"

    def test_acc(*args: str) -> float:
        result = cli("eval", ckpt, *args, quiet, env=env, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        return float(re.search(r"test/acc\s+([0-9.]+)", result.stdout).group(1))

    stored = json.loads((run / "metrics.json").read_text())["test/acc"]
    assert stored > 0.95
    assert test_acc(f"hydra.run.dir={tmp_path / 'plain'}") == pytest.approx(stored, abs=1e-3)
    assert test_acc("hooks=[ablate]", "hooks.ablate.layers=[encoder.1]", "hooks.ablate.channels=all",
                    f"hydra.run.dir={tmp_path / 'ablated'}") <= 0.2
    test_acc("hooks=[grad_cam]", "hooks.grad_cam.layer=encoder.1", f"hydra.run.dir={tmp_path / 'cam'}")
    assert (tmp_path / "cam" / "grad_cam" / "encoder.1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
