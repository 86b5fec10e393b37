"""A run stopped by a real SIGTERM at a chosen step, and a run's last checkpoint: what resume tests compare."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig
from pytorch_lightning.callbacks import Callback

from modelforge.errors import Terminated
from modelforge.train import train


class SigtermAtStep(Callback):
    """Sends this process a real SIGTERM after training step ``step`` (mid-epoch)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def last_checkpoint(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)


def stopped_by_sigterm_at(step: int, cfg: DictConfig, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Train ``cfg`` until a real SIGTERM at ``step`` stops it; the checkpoint it left to resume from."""
    from modelforge.train import trainer as trainer_module

    callbacks = trainer_module._callbacks
    monkeypatch.setattr(trainer_module, "_callbacks", lambda *a, **k: [*callbacks(*a, **k), SigtermAtStep(step)])
    with pytest.raises(Terminated):
        train(cfg, run_dir=run_dir)
    monkeypatch.undo()
    return run_dir / "checkpoints" / "interrupted.ckpt"
