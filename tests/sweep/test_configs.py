"""The experiment, hparams_search, trainer and launcher configs compose and say what they mean."""

from __future__ import annotations

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from modelforge.build import model_config_from_run, validate_model_config
from modelforge.config import conf_dir
from modelforge.sweep.study import search_settings

EXPERIMENTS = sorted(p.stem for p in (conf_dir() / "experiment").glob("*.yaml"))


def compose_train(*overrides: str, hydra_cfg: bool = False) -> DictConfig:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=hydra_cfg)


def test_train_config_enables_the_sweep_summary() -> None:
    callbacks = compose_train(hydra_cfg=True).hydra.callbacks
    assert callbacks.get("sweep_summary", {}).get("_target_") == "modelforge.sweep.callback.SweepSummary", (
        "conf/train.yaml needs hydra.callbacks.sweep_summary._target_: modelforge.sweep.callback.SweepSummary")


def test_the_documented_experiments_exist() -> None:
    assert {"seed_cnn", "activations", "enc_sizes", "fast"} <= set(EXPERIMENTS)
    docs = conf_dir().parent / "experiments"
    for name in EXPERIMENTS:
        assert (docs / f"{name}.md").is_file(), f"experiments/{name}.md documents conf/experiment/{name}.yaml"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_builds_a_valid_model(name: str) -> None:
    cfg = OmegaConf.to_container(compose_train(f"experiment={name}"), resolve=True)
    validate_model_config(model_config_from_run(cfg))


@pytest.mark.parametrize(("name", "key"), [("activations", "activation"), ("enc_sizes", "enc_sizes")])
def test_sweep_experiments_sweep_their_key(name: str, key: str) -> None:
    params = compose_train(f"experiment={name}", hydra_cfg=True).hydra.sweeper.params
    (override,) = OverridesParser.create().parse_overrides([f"{key}={params[key]}"])
    assert override.is_sweep_override() and len(list(override.sweep_string_iterator())) >= 4


def test_fast_is_one_epoch_and_seed_cnn_is_the_seeds_model() -> None:
    assert compose_train("experiment=fast").trainer.max_epochs == 1
    seed = compose_train("experiment=seed_cnn")
    assert seed.model.name == "seed_cnn" and seed.sched._target_ is None and seed.optim._target_ == "torch.optim.Adam"


def test_optuna_search_space() -> None:
    cfg = compose_train("hparams_search=optuna", hydra_cfg=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_ == "hydra_plugins.modelforge_optuna_sweeper.sweeper.OptunaSweeper"
    settings = search_settings(sweeper, cfg.monitor, cfg.hydra.launcher._target_)
    assert (settings.objectives, settings.directions) == (("val/acc",), ("maximize",))
    assert settings.sampler == "tpe" and settings.seed == 0 and settings.pruner == "none"
    assert sweeper.study_name and OmegaConf.to_container(sweeper)["storage"] == "sqlite:///${hydra.sweep.dir}/optuna.db"
    assert set(sweeper.params) == {"optim.lr", "enc_sizes", "activation", "model.dropout"}
    parsed = {o.get_key_element(): o for o in OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in sweeper.params.items()])}
    assert "log" in parsed["optim.lr"].value().tags
    # Each enc_sizes choice is handed to Optuna as a string that parses back into a list.
    choices = list(parsed["enc_sizes"].sweep_string_iterator())
    assert [yaml.safe_load(c) for c in choices] == [[16], [32, 64], [32, 64, 128]]


@pytest.mark.parametrize("name", ["ddp", "ddp_cpu"])
def test_ddp_trainers_keep_every_default_key(name: str) -> None:
    default = compose_train().trainer
    trainer = compose_train(f"trainer={name}").trainer
    assert set(trainer) == set(default) and trainer.strategy == "ddp"
    assert trainer.accelerator == ("gpu" if name == "ddp" else "cpu")
    if name == "ddp_cpu":
        assert trainer.devices == 2


@pytest.mark.parametrize("launcher", ["joblib", "slurm", "submitit_slurm"])
def test_launchers_compose(launcher: str) -> None:
    cfg = compose_train(f"hydra/launcher={launcher}", hydra_cfg=True).hydra.launcher
    assert cfg._target_.startswith("hydra_plugins.")
    if launcher == "slurm":
        assert cfg.tasks_per_node == cfg.gpus_per_node == 1 and "partition" in cfg
