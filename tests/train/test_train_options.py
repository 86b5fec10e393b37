"""Run options: loggers, channels_last, precision defaults, and run directories that never collide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from modelforge.train import train
from modelforge.train.trainer import default_precision
from tests.train.conftest import compose_train, tiny_cli_args


def test_tensorboard_logger_writes_event_files(tiny_mnist: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    cfg = compose_train(tiny_mnist, "logger=tensorboard", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
                        "model=mlp", "model.hidden_sizes=[8]")
    train(cfg, run_dir=tmp_path)
    assert list((tmp_path / "logs").glob("events.out.tfevents.*"))


def test_channels_last_trains_to_the_same_numbers(tiny_mnist: Path, tmp_path: Path) -> None:
    common = ("model=cnn", "enc_sizes=[4]", "dec_sizes=[]", "trainer.max_epochs=1", "sched=none")
    train(compose_train(tiny_mnist, *common), run_dir=tmp_path / "a")
    train(compose_train(tiny_mnist, *common, "channels_last=true"), run_dir=tmp_path / "b")
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in "ab")
    assert b["test/loss"] == pytest.approx(a["test/loss"], rel=1e-3)


def test_precision_defaults_to_float32_without_a_gpu() -> None:
    expected = "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"
    assert default_precision("auto") == expected
    assert default_precision("cpu") == "32-true"


def test_two_launches_in_the_same_second_get_two_run_dirs(tiny_mnist: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "modelforge", "train", "trainer.fast_dev_run=true", "model=mlp",
           "model.hidden_sizes=[8]", *tiny_cli_args(tiny_mnist)]
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, **env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
    assert all(p.wait(timeout=300) == 0 for p in procs), [p.stderr.read()[-1000:] for p in procs]
    runs = sorted(tmp_path.glob("outputs/train/*/*/metrics.json"))
    assert len(runs) == 2, runs
