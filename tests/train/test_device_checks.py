"""Device and precision values a run cannot train with: one error before any work (trainer.devices=-1 on a CPU was
a TypeError from deep inside Lightning), and weights that turned NaN are a divergence, never finished figures."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.run_config import tiny_cli_args


def test_devices_minus_one_on_a_cpu_is_one_error_naming_the_key_and_what_is_allowed(run_main, tiny_mnist: Path,
                                                                                   tmp_path: Path) -> None:
    result = run_main("train", "trainer.devices=-1", *tiny_cli_args(tiny_mnist), f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "TypeError" not in result.stderr
    assert ("error: trainer.devices: -1 refused by Lightning: `devices` selected with `CPUAccelerator` should be an "
            "int > 0.\n  allowed: auto, or a number of processes >= 1 (trainer.devices=1)") in result.stderr
    assert not (tmp_path / "run").exists()


def test_float16_weights_that_turn_nan_end_the_run_as_diverged(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    # 16-true: Adam's eps (1e-8) is 0 in float16, and the first step's update makes the weights NaN. The training
    # loss was computed before it: only the validation loss shows it (this run exited 0 with val/loss nan).
    result = run_main("train", "model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=1",
                      "trainer.precision=16-true", *tiny_cli_args(tiny_mnist), "data.batch_size=128",
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert "error: training diverged at step 1 (epoch 0): loss nan" in result.stderr
    assert "float16 overflow (trainer.precision=16-true): try bf16-mixed or 32-true" in result.stderr
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "diverged"
