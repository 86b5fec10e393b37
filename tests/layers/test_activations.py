from __future__ import annotations

import pytest
import torch
from torch import nn

from modelforge import ACTIVATIONS, ConfigError, UnknownNameError, make_activation


@pytest.mark.parametrize("name", ACTIVATIONS.names(plugins=False))
def test_each_activation_builds_a_module_that_keeps_shape(name: str) -> None:
    act = make_activation(name)
    assert isinstance(act, nn.Module)
    assert act(torch.randn(2, 3)).shape == (2, 3)


def test_options_reach_the_module() -> None:
    act = make_activation({"name": "lrelu", "negative_slope": 0.2})
    assert act(torch.tensor([-1.0])).item() == pytest.approx(-0.2)


def test_unknown_option_is_named_with_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"(?s)model.activation.negative_slop: .*did you mean 'negative_slope'"):
        make_activation({"name": "lrelu", "negative_slop": 0.2}, path="model.activation")


def test_unknown_activation_suggests_closest() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'silu'"):
        make_activation("silu2")


def test_only_the_chosen_activation_has_parameters() -> None:
    from modelforge.layers.blocks import ConvBlock

    keys = ConvBlock(1, 4, activation="relu").state_dict().keys()
    assert not any("act" in k for k in keys)
    prelu_keys = ConvBlock(1, 4, activation="prelu").state_dict().keys()
    assert [k for k in prelu_keys if "act" in k] == ["act.weight"]
