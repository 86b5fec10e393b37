"""An allocation that fails is one message naming the model and the size, and metrics.json keeps it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from modelforge.errors import ResourceError
from modelforge.train import train
from tests.helpers.run_config import compose_train, tiny_cli_args


def test_a_model_over_max_params_is_refused_before_it_is_allocated(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    result = run_main("train", "model=cnn", "enc_sizes=[8]", "dec_sizes=[100000000000]", *tiny_cli_args(tiny_mnist),
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[0] == (
        "error: model: the model would hold 157,900,000,000,123 parameters and buffers (631.6 TB as float32), more "
        "than model.max_params (1,000,000,000); the largest is decoder.0.linear.weight [100000000000, 1568]")
    assert not (tmp_path / "run").exists() and "Traceback" not in result.stderr


def test_a_model_too_big_to_build_is_one_message(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    # Past the cap (raised): a 1e11-wide Linear asks for 627,200 GB at once: the allocator refuses at once.
    result = run_main("train", "model=cnn", "enc_sizes=[8]", "dec_sizes=[100000000000]", "model.max_params=1000000000000000",
                      *tiny_cli_args(tiny_mnist), f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: out of memory while building the model: model=cnn enc_sizes=[8] dec_sizes=[100000000000] "
        "activation=relu asked for 627,200.0 GB in one block (in RAM). Choose smaller enc_sizes/dec_sizes, "
        "a smaller data.batch_size, or bf16-mixed precision on a GPU")
    assert "Traceback" not in result.stderr


def test_out_of_memory_while_training_is_what_metrics_json_records(tiny_mnist: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from modelforge.train.module import ClassifierModule

    def out_of_memory(self, batch, batch_idx):
        # torch's own error type and text (what a too large batch raises on a GPU)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 38.15 GiB. GPU 0 has a total capacity "
                                     "of 79.10 GiB of which 1.20 GiB is free.")

    monkeypatch.setattr(ClassifierModule, "training_step", out_of_memory)
    with pytest.raises(ResourceError, match=r"out of memory while training: model=mlp hidden_sizes=\[16\] .*asked for "
                                            r"38.15 GiB more on the GPU \(on the GPU\)"):
        train(compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]"), run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["error"].startswith("ResourceError: out of memory while training")
    # No checkpoint of the moment: its save would fail the same way and hide this error.
    assert not (tmp_path / "checkpoints" / "interrupted.ckpt").exists() and "resume_with" not in metrics
