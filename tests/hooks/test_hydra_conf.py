"""conf/hooks/: one option per plugin, selected several at a time with hooks=[a,b], composed by real Hydra."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from modelforge.config import conf_dir
from modelforge.errors import ConfigError
from modelforge.hooks import GradClip, Verbose, build_hook_plugins
from modelforge.registry import HOOKS

HOOKS_DIR = conf_dir() / "hooks"


@pytest.mark.parametrize("name", HOOKS.names())
def test_each_plugin_has_a_yaml_that_packages_itself_under_hooks(name: str) -> None:
    text = (HOOKS_DIR / f"{name}.yaml").read_text()
    assert text.splitlines()[0] == f"# @package hooks.{name}"


@pytest.mark.parametrize("name", HOOKS.names())
def test_yaml_defaults_are_the_options_defaults(name: str, primary: Path) -> None:
    # The Options dataclass is the one source of a plugin's defaults: the YAML starts from the node
    # generated from it and writes no value of its own; composing it gives exactly those defaults.
    text = (HOOKS_DIR / f"{name}.yaml").read_text()
    schema = HOOKS.schema(name)
    assert yaml.safe_load(text) == {"defaults": [f"/hook_defaults/{name}@_here_", "_self_"]}
    assert f"their defaults live in {schema.__name__}, modelforge/hooks/" in text
    cfg = compose_hooks(primary, "hooks_only", [f"hooks=[{name}]"])
    assert OmegaConf.to_container(cfg.hooks[name]) == dataclasses.asdict(schema())


@pytest.fixture
def primary(tmp_path: Path) -> Path:
    """A primary config that has nothing but an empty hooks group, searching the repo's conf/."""
    (tmp_path / "hooks_only.yaml").write_text(
        "defaults:\n  - hooks: []\n  - _self_\n\n"
        f"hydra:\n  searchpath:\n    - file://{conf_dir()}\n"
    )
    return tmp_path


def compose_hooks(config_dir: Path, name: str, overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(name, overrides=overrides)


def test_an_empty_default_builds_no_plugins(primary: Path) -> None:
    cfg = compose_hooks(primary, "hooks_only", [])
    assert cfg.get("hooks") is None and build_hook_plugins(cfg.get("hooks")) == []


def test_several_plugins_and_their_overrides(primary: Path) -> None:
    cfg = compose_hooks(primary, "hooks_only", [
        "hooks=[verbose,grad_clip,feature_capture]", "hooks.grad_clip.value=0.01",
        "hooks.feature_capture.layers=[encoder.*]"])
    assert list(cfg.hooks) == ["verbose", "grad_clip", "feature_capture"]
    verbose, clip, capture = build_hook_plugins(cfg.hooks)
    assert isinstance(verbose, Verbose) and isinstance(clip, GradClip)
    assert clip.options.value == 0.01 and capture.options.layers == ["encoder.*"]


def test_a_misspelled_option_fails_in_hydra_or_in_the_builder(primary: Path) -> None:
    with pytest.raises(ConfigCompositionException):  # the group's keys are known to Hydra
        compose_hooks(primary, "hooks_only", ["hooks=[grad_clip]", "hooks.grad_clip.valu=1"])
    cfg = compose_hooks(primary, "hooks_only", ["hooks=[grad_clip]", "+hooks.grad_clip.valu=1"])
    with pytest.raises(ConfigError, match=r"^hooks\.grad_clip\.valu: .*\n  did you mean 'value'\?"):
        build_hook_plugins(cfg.hooks)


@pytest.mark.parametrize("primary_name", ["summary", "train", "eval"])
def test_the_commands_configs_compose_with_and_without_hooks(primary_name: str) -> None:
    if not (conf_dir() / f"{primary_name}.yaml").is_file():
        pytest.skip(f"conf/{primary_name}.yaml not written yet")
    assert build_hook_plugins(compose_hooks(conf_dir(), primary_name, []).get("hooks")) == []
    cfg = compose_hooks(conf_dir(), primary_name, ["hooks=[verbose,grad_clip]", "hooks.grad_clip.value=0.01"])
    assert [p.name for p in build_hook_plugins(cfg.hooks)] == ["verbose", "grad_clip"]
    assert cfg.hooks.grad_clip.value == 0.01
