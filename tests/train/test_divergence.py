"""A loss that stops being a number (or leaves its bound) stops the run at that step, exit 3."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from modelforge.stops import Diverged
from modelforge.train import train
from tests.train.conftest import compose_train, tiny_cli_args


def _strict(text: str) -> dict:
    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_sgd_at_lr_1e6_stops_naming_the_step_and_exits_3(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = run_main("train", "model=cnn", "enc_sizes=[8,16]", "optim=sgd", "optim.lr=1e6", "trainer.max_epochs=1",
                 *tiny_cli_args(tiny_mnist), f"hydra.run.dir={run}")
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    match = re.search(r"error: training diverged at step (\d+) \(epoch 0\): loss (\S+)", result.stderr)
    assert match, result.stderr[-2000:]
    assert "optim.lr=1000000.0" in result.stderr and "trainer.precision=32-true" in result.stderr
    metrics = _strict((run / "metrics.json").read_text())
    assert metrics["status"] == "diverged" and metrics["global_step"] == int(match.group(1))
    assert "resume_with" not in metrics and not (run / "checkpoints" / "interrupted.ckpt").exists()


def test_a_nan_loss_stops_the_run_even_without_a_bound(tiny_mnist: Path, tmp_path: Path) -> None:
    cfg = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]", "optim=sgd", "optim.lr=1e30",
                        "sched=none", "divergence.max_loss=null", "trainer.max_epochs=5")
    with pytest.raises(Diverged, match=r"training diverged at step \d+ \(epoch \d\): loss (nan|inf)\. Likely causes"):
        train(cfg, run_dir=tmp_path)
    metrics = _strict((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "diverged"


def test_adam_at_lr_1e6_does_not_finish_silently(tiny_mnist: Path, tmp_path: Path) -> None:
    cfg = compose_train(tiny_mnist, "model=cnn", "enc_sizes=[8,16]", "optim.lr=1e6", "trainer.max_epochs=3")
    with pytest.raises(Diverged, match=r"loss \S+ above divergence.max_loss=10000"):
        train(cfg, run_dir=tmp_path)


@pytest.mark.parametrize("value", ["-1", "abc", "true"])
def test_a_bad_bound_is_a_config_error(value: str, tiny_mnist: Path, tmp_path: Path) -> None:
    from modelforge.errors import ConfigError

    with pytest.raises(ConfigError, match=r"(?s)divergence.max_loss: got .*allowed: null or a number > 0"):
        train(compose_train(tiny_mnist, f"divergence.max_loss={value}"), run_dir=tmp_path)
