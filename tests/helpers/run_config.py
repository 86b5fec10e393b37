"""Real Hydra composition of conf/train.yaml, pointed at tiny data and kept quick."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from modelforge.config import conf_dir

# Real Hydra composition of conf/train.yaml, pointed at tiny data and kept quick.
TINY = [
    "data.verify=false",
    "data.download=false",
    "data.val_size=32",
    "data.batch_size=32",
    "trainer.accelerator=cpu",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.log_every_n_steps=1",
]


def compose_train(data_dir: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        # curves=false: ~0.5 s a run to draw; the tests of the learning curves ask for them (curves=true)
        return compose("train", overrides=[f"data.data_dir={data_dir}", *TINY, "curves=false", *overrides])


def tiny_cli_args(data_dir: Path) -> list[str]:
    return [f"data.data_dir={data_dir}", *TINY]
