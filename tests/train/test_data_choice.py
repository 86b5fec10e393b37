"""Training on other data: a user's own LightningDataModule, an IDX folder, shapes from the data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset

from modelforge.errors import ConfigError
from modelforge.registry import DATAMODULES
from modelforge.train import train
from tests.helpers.mnist_idx import write_idx_set
from tests.helpers.run_config import compose_train


class ColourBlobs(pl.LightningDataModule):
    """A user's data module: 3-channel 8x12 images, 4 classes told apart by which channel is bright."""

    def __init__(self, n: int = 64, batch_size: int = 16, brightness: float = 3.0) -> None:
        super().__init__()
        self.n, self.batch_size, self.brightness = n, batch_size, brightness
        self.input_shape = (3, 8, 12)
        self.n_classes = 4
        self.name = "colour_blobs"

    def _set(self, seed: int) -> TensorDataset:
        g = torch.Generator().manual_seed(seed)
        y = torch.randint(0, 4, (self.n,), generator=g)
        x = torch.randn(self.n, 3, 8, 12, generator=g)
        for i, k in enumerate(y.tolist()):
            if k < 3:
                x[i, k] += self.brightness
        return TensorDataset(x, y)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self._set(0), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._set(1), batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self._set(2), batch_size=self.batch_size)


@pytest.fixture
def colour_blobs():
    DATAMODULES.add("colour_blobs", ColourBlobs)
    yield
    DATAMODULES._entries.pop("colour_blobs")


def _with_data(cfg, data: dict):
    cfg = OmegaConf.to_container(cfg)
    cfg["data"] = data
    return cfg


def test_a_user_datamodule_trains_and_shapes_the_model(tiny_mnist: Path, tmp_path: Path, colour_blobs) -> None:
    cfg = _with_data(compose_train(tiny_mnist, "model=cnn", "enc_sizes=[4]", "dec_sizes=[]", "trainer.max_epochs=4",
                                   "optim.lr=3e-2"), {"name": "colour_blobs", "n": 128, "brightness": 4.0})
    train(cfg, run_dir=tmp_path)
    stored = yaml.safe_load((tmp_path / "config.yaml").read_text())
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert stored["data"]["name"] == "colour_blobs"
    assert (stored["model"]["in_channels"], stored["model"]["input_size"], stored["model"]["n_classes"]) == (3, [8, 12], 4)
    assert metrics["data"] == {"name": "colour_blobs", "input_shape": [3, 8, 12], "n_classes": 4}
    assert metrics["test/acc"] >= 0.9  # the channel that lights up gives the class away


def test_a_user_datamodule_s_options_are_checked(tiny_mnist: Path, tmp_path: Path, colour_blobs) -> None:
    cfg = _with_data(compose_train(tiny_mnist), {"name": "colour_blobs", "brigthness": 2.0})
    with pytest.raises(ConfigError, match=r"(?s)data.brigthness: data module 'colour_blobs' takes no option.*'brightness'"):
        train(cfg, run_dir=tmp_path)
    assert not (tmp_path / "config.yaml").exists()


def test_an_idx_folder_trains_with_shapes_from_its_files(tiny_mnist: Path, tmp_path: Path) -> None:
    write_idx_set(tmp_path / "bars", n_train=80, n_test=40, n_classes=5, size=(20, 20))
    cfg = compose_train(tiny_mnist, "data=idx", f"data.data_dir={tmp_path / 'bars'}", "data.val_size=16",
                        "model=mlp", "model.hidden_sizes=[32]", "trainer.max_epochs=3", "optim.lr=3e-2")
    train(cfg, run_dir=tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["data"] == {"name": "idx", "input_shape": [1, 20, 20], "n_classes": 5}
    assert metrics["test/acc"] >= 0.9


def test_an_explicit_model_shape_that_disagrees_with_the_data_is_an_error(tiny_mnist: Path, tmp_path: Path) -> None:
    write_idx_set(tmp_path / "bars", n_classes=5, size=(20, 20))
    cfg = compose_train(tiny_mnist, "data=idx", f"data.data_dir={tmp_path / 'bars'}", "data.val_size=8",
                        "model=mlp", "model.n_classes=7")
    with pytest.raises(ConfigError, match=r"model.n_classes: is 7, but data 'idx' gives 5"):
        train(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides", [("optim=rmsprop",), ("optim._target_=torch.optim.NAdam", "sched=plateau"),
                                       ("optim=sgd", "sched=warmup_cosine", "+optim.no_decay_norm_bias=true")])
def test_other_optimizers_and_schedules_train(tiny_mnist: Path, tmp_path: Path, overrides: tuple[str, ...]) -> None:
    cfg = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=2", *overrides)
    train(cfg, run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["val/acc"] >= 0.5
