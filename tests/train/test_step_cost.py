"""What a run adds to each training step stays small: few callbacks (Lightning dispatches every hook of every
callback at every step), checkpoint callbacks that do nothing between epochs, and checkpoints of earlier runs that
still resume their callbacks' state (the state keys did not change with the classes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytorch_lightning.callbacks import ModelCheckpoint

from modelforge.train.checkpoints import EpochCheckpoint, RunCheckpoints
from modelforge.train.run import _prepare
from modelforge.train.run_config import validate_run_config
from tests.helpers.run_config import compose_train


def test_a_default_run_has_few_callbacks(tiny_mnist: Path, tmp_path: Path) -> None:
    _, trainer, _ = _prepare(validate_run_config(compose_train(tiny_mnist, "trainer.enable_progress_bar=true",
                                                                "trainer.log_every_n_steps=50")),
                             tmp_path)
    kinds = sorted(type(c).__name__ for c in trainer.callbacks)
    # the best and the last/interrupted checkpoints, the lr for the CSV log, its step interval, the progress lines
    assert kinds == ["EpochCheckpoint", "LearningRateMonitor", "LineProgress", "RunCheckpoints", "StepLogInterval"]


def test_checkpoint_state_keys_are_those_earlier_runs_stored(tmp_path: Path) -> None:
    settings = dict(dirpath=tmp_path, filename="best-epoch{epoch:02d}", auto_insert_metric_name=False,
                    monitor="val/acc", mode="max")
    assert EpochCheckpoint(**settings).state_key == ModelCheckpoint(**settings).state_key
    assert RunCheckpoints(tmp_path).state_key == ("LastCheckpoint{'monitor': None, 'mode': 'min', "
                                                  "'every_n_train_steps': 0, 'every_n_epochs': 1, "
                                                  "'train_time_interval': None}")


def test_an_epoch_checkpoint_refuses_per_step_saving(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="saves at epoch ends only"):
        EpochCheckpoint(dirpath=tmp_path, every_n_train_steps=10)
