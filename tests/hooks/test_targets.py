"""Choosing modules by exact name, glob or type name; a pattern that matches nothing is an error."""

from __future__ import annotations

import pytest
from torch import nn

from modelforge.errors import ConfigError
from modelforge.hooks import build_hook_plugins, select_targets
from modelforge.hooks.targets import default_targets
from modelforge.registry import HOOKS
from tests.helpers.tiny_net import LEAF_SHAPES, PARAM_LAYERS, REQUIRED_OPTIONS, hook_count


def names(model: nn.Module, patterns: list[str] | None, **kwargs: object) -> list[str]:
    return [t.name for t in select_targets(model, patterns, **kwargs)]


def test_exact_name_glob_and_type_name(model) -> None:
    assert names(model, ["encoder.3"]) == ["encoder.3"]
    assert names(model, ["decoder.*"]) == ["decoder.0", "decoder.1"]
    assert names(model, ["Conv2d"]) == ["encoder.0", "encoder.3"]
    assert names(model, ["encoder"]) == ["encoder"]
    assert names(model, ["*"])[0] == "encoder"  # the model itself ("") is never matched


def test_results_keep_model_order_without_duplicates(model) -> None:
    assert names(model, ["Linear", "encoder.?", "Conv2d"]) == [
        "encoder.0", "encoder.1", "encoder.2", "encoder.3", "encoder.4", "decoder.1"]


def test_defaults(model) -> None:
    assert names(model, None, default="leaves") == list(LEAF_SHAPES)
    assert names(model, None, default="children") == ["encoder", "decoder"]
    assert names(model, None, default="with_params") == PARAM_LAYERS
    assert [t.name for t in default_targets(nn.Linear(2, 2), "leaves")] == [""]


def test_gradient_plugins_skip_modules_without_parameters(model) -> None:
    assert names(model, ["encoder.*"], needs_params=True) == ["encoder.0", "encoder.1", "encoder.3"]
    with pytest.raises(ConfigError, match=r"x\[0\]: 'ReLU' matches only modules without trainable parameters: "
                                          r"encoder\.2, encoder\.4"):
        select_targets(model, ["ReLU"], path="x", needs_params=True)


@pytest.mark.parametrize("name", HOOKS.names())
def test_pattern_matching_nothing_lists_names_and_suggests(name: str, model) -> None:
    key = HOOKS.get(name).pattern_key
    value = ["encodr.0"] if key == "layers" else "encodr.0"  # grad_cam names one layer
    plugin = build_hook_plugins({name: {**REQUIRED_OPTIONS.get(name, {}), key: value}})[0]
    where = rf"{key}\[0\]" if key == "layers" else key
    with pytest.raises(ConfigError, match=rf"^hooks\.{name}\.{where}: 'encodr\.0' matches no module of TinyNet") as info:
        plugin.attach(model)
    message = str(info.value)
    assert "did you mean 'encoder.0'?" in message
    assert "allowed: module names: encoder, encoder.0, encoder.1, encoder.2, encoder.3, encoder.4, " \
           "decoder, decoder.0, decoder.1; type names: BatchNorm2d, Conv2d, Flatten, Linear, ReLU, Sequential" in message
    assert hook_count(model) == 0


def test_the_failing_pattern_is_named_by_its_index(model) -> None:
    with pytest.raises(ConfigError, match=r"^hooks\.verbose\.layers\[2\]: 'Conv3d' matches no module.*\n"
                                          r"  did you mean 'Conv2d'\?"):
        build_hook_plugins({"verbose": {"layers": ["encoder.0", "Linear", "Conv3d"]}})[0].attach(model)
