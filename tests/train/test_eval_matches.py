"""eval of a checkpoint reproduces the figures its run recorded: it tests on the kind of device and in the precision
the run trained with (recorded with the run: what `auto` and a null precision picked), unless told otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.run_config import tiny_cli_args


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory: pytest.TempPathFactory, tiny_mnist: Path) -> Path:
    """A run trained (and tested) in bf16 autocast: what the GPU default does, on a CPU."""
    from modelforge.__main__ import main

    run = tmp_path_factory.mktemp("bf16") / "run"
    assert main(["train", "model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=1", "trainer.precision=bf16-mixed",
                 *tiny_cli_args(tiny_mnist), f"hydra.run.dir={run}"]) == 0
    return run


def test_a_run_records_the_device_and_precision_it_trained_with(bf16_run: Path) -> None:
    trainer = yaml.safe_load((bf16_run / "config.yaml").read_text())["trainer"]
    assert (trainer["accelerator"], trainer["precision"]) == ("cpu", "bf16-mixed")
    device = json.loads((bf16_run / "metrics.json").read_text())["device"]
    assert device["accelerator"] == "cpu" and device["precision"] == "bf16-mixed" and device["devices"] == 1
    assert "device: cpu (" in (bf16_run / "train.log").read_text()


def test_eval_tests_in_the_precision_the_run_trained_with_and_reproduces_its_figures(run_main, bf16_run: Path,
                                                                                      tmp_path: Path) -> None:
    result = run_main("eval", f"ckpt_path={bf16_run / 'checkpoints' / 'last.ckpt'}", "trainer.enable_progress_bar=false",
                      f"hydra.run.dir={tmp_path / 'eval'}")
    assert result.returncode == 0, result.stderr[-2000:]
    recorded = json.loads((bf16_run / "metrics.json").read_text())
    again = json.loads((tmp_path / "eval" / "eval_metrics.json").read_text())
    assert again["test/loss"] == recorded["test/loss"] and again["test/acc"] == recorded["test/acc"]


def test_a_precision_named_on_the_command_line_wins(run_main, bf16_run: Path, tmp_path: Path) -> None:
    result = run_main("eval", f"ckpt_path={bf16_run / 'checkpoints' / 'last.ckpt'}", "trainer.precision=32-true",
                      "trainer.enable_progress_bar=false", f"hydra.run.dir={tmp_path / 'eval'}")
    assert result.returncode == 0, result.stderr[-2000:]
    recorded = json.loads((bf16_run / "metrics.json").read_text())["test/loss"]
    again = json.loads((tmp_path / "eval" / "eval_metrics.json").read_text())["test/loss"]
    assert again != recorded and again == pytest.approx(recorded, abs=2e-2)  # float32 vs bf16 autocast
