"""TrainConfig: the train command's own keys, their defaults held once, typed by OmegaConf at composition
and for a plain dict from Python alike, refusals in modelforge's words."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from modelforge import ConfigError
from modelforge.config import TrainConfig, conf_dir, omegaconf_error, typed_train_config

SCHEMA_KEYS = [f.name for f in dataclasses.fields(TrainConfig)]


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def _refusal(*overrides: str) -> str:
    """The message of the error composing with ``overrides`` raises (as the CLI words OmegaConf's)."""
    with pytest.raises(ConfigCompositionException) as info:
        _compose(*overrides)
    return str(omegaconf_error(info.value.__cause__))


def test_the_config_store_holds_the_schema_and_train_yaml_does_not_repeat_it() -> None:
    stored = ConfigStore.instance().load("train_schema.yaml").node
    assert OmegaConf.get_type(stored) is TrainConfig
    assert OmegaConf.to_container(stored) == {
        "enc_sizes": None, "dec_sizes": None, "activation": None, "seed": 0, "monitor": "val/acc", "ckpt_path": None,
        "label_smoothing": 0.0, "channels_last": False, "compile": False, "compile_backend": "inductor",
        "compile_mode": None, "cuda_graph": False, "divergence": {"max_loss": 1.0e4},
        "init": {"from": None, "map": None, "strict": False}, "freeze": [], "freeze_bn": True,
        "curves": True, "task": None}
    train_yaml = yaml.safe_load((conf_dir() / "train.yaml").read_text())
    assert "train_schema" in train_yaml["defaults"]
    assert set(train_yaml) == {"defaults", "hydra"}  # no top-level default written a second time


def test_composition_is_typed_by_the_schema_and_keeps_the_groups() -> None:
    cfg = _compose("seed=3", "label_smoothing=0", "init.map={head.*:classifier.*,decoder.*:null}", "freeze=encoder.*", "+notes=x")
    assert OmegaConf.get_type(cfg) is TrainConfig
    assert cfg.seed == 3 and cfg.label_smoothing == 0.0 and isinstance(cfg.label_smoothing, float)
    assert cfg.init == {"from": None, "map": {"head.*": "classifier.*", "decoder.*": None}, "strict": False}
    assert cfg.freeze == "encoder.*"  # one glob may stand alone
    assert cfg.notes == "x"  # +key= adds a key, as before
    assert {"model", "data", "trainer", "optim", "sched", "logger"} <= set(cfg)
    assert cfg.data.seed == 3  # data.seed follows ${seed}


@pytest.mark.parametrize(("override", "message"), [
    ("seed=abc", "seed: expected int or null, got str 'abc'\n  allowed: int or null"),
    ("seed=1.5", "seed: expected int or null, got float 1.5"),
    ("label_smoothing=x", "label_smoothing: expected float, got str 'x'\n  allowed: float"),
    ("compile=maybe", "compile: expected bool, got str 'maybe'"),
    ("enc_sizes=3", "enc_sizes: expected list of int or null, got int 3"),
    ("enc_sizes=[32,a]", "enc_sizes[1]: expected int, got str 'a'"),
    ("divergence.max_loss=abc", "divergence.max_loss: expected float or null, got str 'abc'"),
    ("divergence=3", "divergence: expected mapping or null, got int 3"),
    ("init.strict=maybe", "init.strict: expected bool, got str 'maybe'"),
])
def test_a_value_of_the_wrong_type_is_refused_at_composition(override: str, message: str) -> None:
    assert _refusal(override).startswith(message)


def test_an_unknown_key_is_named_with_the_closest() -> None:
    assert _refusal("init.fro=x") == "init.fro: no key 'fro' at 'init'\n  did you mean 'from'?\n  allowed: from, map, strict"


def test_an_unknown_top_level_key_exits_2_and_plus_still_adds_it(run_main, tmp_path: Path) -> None:
    """The typed top level names the key with did-you-mean and keeps the + hint (seed=abc: test_run_checks)."""
    result = run_main("train", "sed=1", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: sed: no key 'sed' at the top level of the config\n  did you mean 'seed'?\n")
    assert result.stderr.endswith("  hint: to add a key that is not in the config, write +sed=...\n")
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


def test_a_plain_dict_takes_the_defaults_and_types_of_composition() -> None:
    typed = typed_train_config({"model": {"name": "mlp"}, "seed": None, "label_smoothing": 0, "extra": 1})
    assert typed["model"] == {"name": "mlp"} and typed["extra"] == 1  # other keys pass as they are
    assert typed["seed"] is None and typed["label_smoothing"] == 0.0 and isinstance(typed["label_smoothing"], float)
    assert typed["divergence"] == {"max_loss": 1.0e4} and typed["freeze_bn"] is True and typed["monitor"] == "val/acc"


@pytest.mark.parametrize(("values", "match"), [
    ({"seed": "abc"}, r"^seed: expected int or null, got str 'abc'\n  allowed: int or null$"),
    ({"channels_last": "maybe"}, r"^channels_last: expected bool, got str 'maybe'"),
    ({"divergence": {"max_los": 3}}, r"^divergence.max_los: no key 'max_los' at 'divergence'\n  did you mean 'max_loss'\?"),
    ({"init": {"from": None, "fro": "x"}}, r"^init.fro: no key 'fro' at 'init'\n  did you mean 'from'\?"),
])
def test_a_plain_dict_is_refused_as_composition_refuses(values: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        typed_train_config(values)


def test_train_from_python_checks_the_same_schema(tmp_path: Path) -> None:
    from modelforge.train import train

    with pytest.raises(ConfigError, match=r"^seed: expected int or null, got str 'abc'"):
        train({"model": {"name": "cnn"}, "seed": "abc"}, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@dataclasses.dataclass
class _TypedMap:
    map: dict[str, str | None] | None = None


def test_omegaconf_still_cannot_merge_into_a_typed_null_dict() -> None:
    """Why init.map is typed Any (omry/omegaconf#1360): when this fails, it can be dict[str, str | None] | None."""
    cfg = OmegaConf.structured(_TypedMap)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'get'"):
        OmegaConf.update(cfg, "map", {"head.*": "classifier.*"}, merge=True)
