"""The callbacks and logger groups: Lightning pieces by name, several at once, checked before work."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import pytest
import pytorch_lightning as pl
from omegaconf import OmegaConf
from pytorch_lightning.callbacks import (
    EarlyStopping,
    LearningRateMonitor,
    StochasticWeightAveraging,
    Timer,
)
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

from modelforge.errors import ConfigError
from modelforge.registry import CALLBACKS
from modelforge.train import train
from modelforge.train.callbacks import build_callbacks, build_loggers
from modelforge.train.trainer import check_trainer_options
from tests.helpers.run_config import compose_train


def chosen(group: str, *overrides: str) -> dict:
    """The ``group`` section of the train config Hydra composes from ``overrides`` (conf/ as shipped)."""
    return OmegaConf.to_container(compose_train(Path("unused"), *overrides)[group], resolve=True)


def test_callbacks_are_built_from_their_config_targets_with_their_own_arguments() -> None:
    cfg = chosen("callbacks", "callbacks=[early_stopping,lr_monitor,swa,timer]", "callbacks.early_stopping.patience=2",
                 "callbacks.swa.swa_lrs=0.01", "callbacks.timer.duration=00:00:10:00")
    assert cfg["early_stopping"]["_target_"] == "pytorch_lightning.callbacks.EarlyStopping"
    stop, lr, swa, timer, report = build_callbacks(cfg, monitor="val/loss")
    assert isinstance(stop, EarlyStopping) and stop.patience == 2 and stop.monitor == "val/loss" and stop.mode == "min"
    assert isinstance(lr, LearningRateMonitor) and isinstance(swa, StochasticWeightAveraging)
    assert isinstance(timer, Timer) and type(report).__name__ == "EarlyStopReport"
    assert build_callbacks(chosen("callbacks", "callbacks=[early_stopping]"))[0].mode == "max"  # val/acc


def test_the_progress_bar_and_model_summary_callbacks_take_the_shipped_yaml() -> None:
    from pytorch_lightning.callbacks import ModelSummary, RichProgressBar

    pytest.importorskip("rich")
    bar, summary = build_callbacks(chosen("callbacks", "callbacks=[rich_progress_bar,model_summary]"))
    assert isinstance(bar, RichProgressBar) and bar._leave is False
    assert isinstance(summary, ModelSummary) and summary._max_depth == 2


@pytest.mark.parametrize(("cfg", "match"), [
    ({"early_stoping": {}}, r"(?s)callbacks.early_stoping: unknown callback 'early_stoping'"),
    ({"stop": {"_target_": "pytorch_lightning.callbacks.EarlyStopping", "patiense": 1}},
     r"(?s)callbacks.stop.patiense: callbacks 'stop' takes no option 'patiense'.*did you mean 'patience'"),
    ({"stop": {"_target_": "pytorch_lightning.callbacks.EarlyStopping", "patience": "two"}},
     r"callbacks.stop.patience: expected int or float, got "),
    ({"swa": {"_target_": "pytorch_lightning.callbacks.StochasticWeightAveraging"}},
     r"callbacks.swa.swa_lrs: missing: callbacks 'swa' needs a value for 'swa_lrs'"),
    ({"swa": {"_target_": "pytorch_lightning.callbacks.StochasticWeightAveraging", "swa_lrs": -1.0}},
     r"callbacks.swa: 'swa' refused its options: .*swa_lrs"),
    ({"evil": {"_target_": "os.system", "command": "true"}},
     r"(?s)callbacks.evil._target_: 'os.system' is not a class modelforge may import.*pytorch_lightning.callbacks"),
    ({"ghost": {"_target_": "pytorch_lightning.callbacks.NoSuchCallback"}},
     r"callbacks.ghost._target_: cannot import 'pytorch_lightning.callbacks.NoSuchCallback'"),
    ({"path": {"_target_": "pytorch_lightning.callbacks.model_checkpoint.Path", "args": "x"}},
     r"callbacks.path._target_: pytorch_lightning.callbacks.model_checkpoint.Path is not a subclass of pytorch_lightning.callbacks.Callback"),
    ({"wrong": {"_target_": "pytorch_lightning.loggers.CSVLogger", "save_dir": "x"}},
     r"callbacks.wrong._target_: 'pytorch_lightning.loggers.CSVLogger' is not a class modelforge may import"),
])
def test_bad_callback_options_are_named(cfg: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_callbacks(cfg)


def test_an_unknown_callback_option_of_the_group_gets_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r"(?s)callbacks.early_stopping.patiense: .*did you mean 'patience'"):
        build_callbacks(chosen("callbacks", "callbacks=[early_stopping]", "+callbacks.early_stopping.patiense=1"))


def test_trainer_callbacks_key_points_to_the_group() -> None:
    with pytest.raises(ConfigError, match=r"(?s)trainer.callbacks: is set by modelforge.*callbacks=\[early_stopping"):
        check_trainer_options({"callbacks": []})


def test_several_loggers_at_once(tmp_path: Path) -> None:
    csv, tb = build_loggers(chosen("logger", "logger=[csv,tensorboard]"), tmp_path)
    assert isinstance(csv, CSVLogger) and isinstance(tb, TensorBoardLogger)
    assert Path(csv.log_dir) == tmp_path / "logs" and Path(tb.log_dir) == tmp_path / "logs"
    assert build_loggers(None, tmp_path) == []
    with pytest.raises(ConfigError, match=r"(?s)logger.csv.flush_every: logger 'csv' takes no option"):
        build_loggers(chosen("logger", "logger=[csv]", "+logger.csv.flush_every=3"), tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is not None, reason="mlflow is installed here")
def test_a_logger_whose_package_is_missing_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"(?s)logger.mlflow: logger 'mlflow' needs the package 'mlflow'.*pip install mlflow"):
        build_loggers(chosen("logger", "logger=[mlflow]"), tmp_path)


class CountEpochs(pl.Callback):
    """A user's callback: counts training epochs, and checks it runs beside the run's own callbacks."""

    seen: list[int] = []

    def __init__(self, tag: str, every: int = 1) -> None:
        self.tag, self.every = tag, every

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch % self.every == 0:
            CountEpochs.seen.append(trainer.current_epoch)


@pytest.fixture
def user_callback():
    CALLBACKS.add("count_epochs", CountEpochs)
    CountEpochs.seen = []
    yield
    CALLBACKS._entries.pop("count_epochs")


def test_early_stopping_and_a_user_callback_in_a_real_run(tiny_mnist: Path, tmp_path: Path, user_callback,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    cfg = compose_train(tiny_mnist, "callbacks=[early_stopping,lr_monitor]", "callbacks.early_stopping.patience=1",
                        "+callbacks.count_epochs.tag=mine", "trainer.max_epochs=20", "trainer.limit_train_batches=2",
                        "model=mlp", "model.hidden_sizes=[16]", "optim.lr=1e-9", "sched=none",
                        "logger=[csv,tensorboard]")
    caplog.set_level(logging.INFO, logger="modelforge.train")
    train(cfg, run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    # lr 1e-9 learns nothing: val/acc stops improving at once, so patience 1 stops after epoch 2.
    assert metrics["stopped_early_epoch"] == 2 and metrics["epochs"] == 2
    assert "did not improve" in metrics["stopped_early_reason"]
    assert "early stopping: stopped after epoch 2 of at most 20" in caplog.text
    assert CountEpochs.seen == [0, 1]
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()  # the run's own checkpointing still works
    assert (tmp_path / "logs" / "metrics.csv").is_file() and list((tmp_path / "logs").glob("events.out.tfevents.*"))
    assert "lr-Adam" in (tmp_path / "logs" / "metrics.csv").read_text().splitlines()[0]
