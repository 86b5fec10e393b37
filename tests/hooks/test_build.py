"""build_hook_plugins: one validation path for every plugin's options, with config paths in errors."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from modelforge.errors import ConfigError, UnknownNameError
from modelforge.hooks import (
    FeatureCapture,
    GradClip,
    GradMonitor,
    Verbose,
    build_hook_plugins,
    check_precision,
)
from modelforge.registry import HOOKS
from tests.helpers.tiny_net import REQUIRED_OPTIONS, options_for


def test_builds_in_config_order_with_options_and_paths() -> None:
    plugins = build_hook_plugins({"grad_clip": {"value": 0.01}, "verbose": {}, "feature_capture": None})
    assert [type(p) for p in plugins] == [GradClip, Verbose, FeatureCapture]
    assert plugins[0].options.value == 0.01 and plugins[1].options.max_calls == 1
    assert [p.path for p in plugins] == ["hooks.grad_clip", "hooks.verbose", "hooks.feature_capture"]


def test_accepts_an_omegaconf_mapping_and_a_custom_path() -> None:
    cfg = OmegaConf.create({"grad_monitor": {"layers": ["encoder.*"], "log_every": 5}})
    (plugin,) = build_hook_plugins(cfg, path="run.hooks")
    assert isinstance(plugin, GradMonitor) and plugin.path == "run.hooks.grad_monitor"
    assert plugin.options.layers == ["encoder.*"] and plugin.options.log_every == 5


@pytest.mark.parametrize("name", [n for n in HOOKS.names() if n not in REQUIRED_OPTIONS])
def test_every_plugin_builds_with_its_defaults_and_has_a_description(name: str) -> None:
    (plugin,) = build_hook_plugins({name: {}})
    assert plugin.name == name and plugin.options == HOOKS.schema(name)()
    assert HOOKS.describe(name)


def test_unknown_plugin_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError, match=r"^hooks\.verbos: unknown hook 'verbos'\n  did you mean 'verbose'\?\n"
                                               r"  allowed: ablate, activation_stats, feature_capture, grad_cam, grad_clip, grad_monitor, input_noise, verbose"):
        build_hook_plugins({"verbose": {}, "verbos": {}})


def test_unknown_option_names_its_path_lists_options_and_suggests() -> None:
    with pytest.raises(ConfigError, match=r"^hooks\.grad_clip\.valu: hook plugin 'grad_clip' has no option 'valu'\n"
                                          r"  did you mean 'value'\?\n  allowed: layers, value$"):
        build_hook_plugins({"grad_clip": {"valu": 0.1}})


@pytest.mark.parametrize("value", [0, -0.5, float("inf"), float("nan")])
def test_clip_value_must_be_positive_and_finite(value: float) -> None:
    with pytest.raises(ConfigError, match=r"^hooks\.grad_clip\.value: must be a positive number"):
        build_hook_plugins({"grad_clip": {"value": value}})


@pytest.mark.parametrize(("options", "match"), [
    ({"grad_clip": {"value": "big"}}, r"^hooks\.grad_clip\.value: expected float, got str 'big'"),
    ({"verbose": {"max_calls": True}}, r"^hooks\.verbose\.max_calls: expected int, got bool"),
    ({"verbose": {"max_calls": 0}}, r"^hooks\.verbose\.max_calls: must be >= 1, got 0"),
    ({"verbose": {"layers": "encoder.*"}}, r"^hooks\.verbose\.layers: expected list of str or null, got str"),
    ({"verbose": {"layers": ["encoder", 3]}}, r"^hooks\.verbose\.layers\[1\]: expected str, got int"),
    ({"verbose": {"layers": []}}, r"^hooks\.verbose\.layers: is empty"),
    ({"feature_capture": {"keep": 0}}, r"^hooks\.feature_capture\.keep: must be >= 1, got 0"),
    ({"feature_capture": {"save_images": "yes"}}, r"^hooks\.feature_capture\.save_images: expected bool"),
    ({"grad_monitor": {"min_norm": 5.0, "max_norm": 1.0}}, r"^hooks\.grad_monitor\.min_norm: must be below max_norm"),
    ({"grad_monitor": {"max_norm": 0}}, r"^hooks\.grad_monitor\.max_norm: must be positive or null"),
    ({"grad_monitor": {"warn_every": 0}}, r"^hooks\.grad_monitor\.warn_every: must be >= 1"),
    ({"verbose": 3}, r"^hooks\.verbose: options must be a mapping, got int 3"),
])
def test_bad_values_are_config_errors_at_their_path(options: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_hook_plugins(options)


def test_everything_is_validated_before_anything_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    monkeypatch.setattr(Verbose, "__init__", lambda self, *a, **k: built.append(self))
    with pytest.raises(ConfigError, match=r"hooks\.grad_clip\.value"):
        build_hook_plugins({"verbose": {}, "grad_clip": {"value": -1}})
    assert built == []


def test_a_list_instead_of_a_mapping_says_how_to_select_plugins() -> None:
    with pytest.raises(ConfigError, match=r"^hooks: must map plugin names to options.*\n.*\n  hint: on the command line: "
                                          r"hooks=\[verbose,grad_clip\]"):
        build_hook_plugins(["verbose"])


@pytest.mark.parametrize("precision", ["16-mixed", "16"])
def test_grad_clip_refuses_float16_mixed_precision(precision: str) -> None:
    plugins = build_hook_plugins({"verbose": {}, "grad_clip": {}})
    with pytest.raises(ConfigError, match=rf"^hooks\.grad_clip: cannot clamp gradients under trainer\.precision={precision}"):
        check_precision(plugins, precision)


def test_grad_monitor_warns_that_float16_norms_are_scaled(caplog: pytest.LogCaptureFixture) -> None:
    check_precision(build_hook_plugins({"grad_monitor": {}}), "16-mixed")
    assert [r.getMessage() for r in caplog.records] == [
        "hooks.grad_monitor: under trainer.precision=16-mixed the norms are of gradients multiplied by the "
        "GradScaler's loss scale"]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-true", "64-true"])
def test_other_precisions_are_accepted(precision: str) -> None:
    check_precision(build_hook_plugins({n: options_for(n) for n in HOOKS.names()}), precision)


def test_options_are_dataclasses_with_one_shared_layers_option() -> None:
    for name in HOOKS.names():
        fields = {f.name for f in dataclasses.fields(HOOKS.schema(name))}
        assert "layers" in fields, name
