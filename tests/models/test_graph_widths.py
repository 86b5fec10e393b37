"""A width of 0 or less that reaches a graph's layer is refused before torch sees it, naming the model parameter
it came from (``model.params.enc_sizes[1]``), through composites, as ``cnn`` refuses its ``enc_sizes``."""

from __future__ import annotations

from typing import Any

import pytest

from modelforge import ConfigError, build_model, create_model


def graph(nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "nodes": nodes, **extra}


@pytest.mark.parametrize("sizes, where, value", [("[8,-4]", "[1]", -4), ("[0,8]", "[0]", 0)])
def test_a_unet_size_of_zero_or_less_names_the_parameter(sizes: str, where: str, value: int) -> None:
    with pytest.raises(ConfigError) as caught:
        create_model("unet", [f"params.enc_sizes={sizes}", "input_size=[16,16]"])
    assert str(caught.value).splitlines() == [
        f"model.params.enc_sizes{where}: must be positive, got {value}: enc_sizes gives the widths of layers",
        "  allowed: integers >= 1"]


def test_a_parameter_that_computes_a_negative_width_is_named() -> None:
    nodes = {"a": {"block": "conv", "args": {"out_channels": "w - 10"}}}
    with pytest.raises(ConfigError, match=r"^model.params.w: gives a width of -6, and widths must be positive: "
                                          r"node 'a' \(conv\) gets out_channels=-6"):
        build_model(graph(nodes, params={"w": 4}))


def test_a_literal_width_of_zero_is_refused_at_its_node() -> None:
    with pytest.raises(ConfigError, match=r"^model.nodes.a.args.out_features: node 'a' \(nn.Linear\) gets "
                                          r"out_features=0: a width must be positive"):
        build_model(graph({"f": {"block": "flatten"}, "a": {"block": "nn.Linear", "args": {"out_features": 0}}}))
