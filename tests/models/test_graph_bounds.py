"""A graph's repeat counts and node count are capped (model.max_repeat, model.max_nodes) before anything is built."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from modelforge import ConfigError, build_model
from modelforge.models.graph_bounds import MAX_NODES, MAX_REPEAT

INNER = {"params": {"n": 3}, "nodes": {"a": {"block": "nn.ReLU", "repeat": "n"}, "b": {"block": "nn.Identity"}}}


def graph(nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 1, "input_size": [4, 4], "n_classes": 16,
            "nodes": {**nodes, "flat": {"block": "flatten"}}, **extra}


def test_a_huge_repeat_is_refused_naming_the_node_and_the_cap() -> None:
    with pytest.raises(ConfigError) as caught:
        build_model(graph({"x": {"block": "conv", "args": {"out_channels": 1}, "repeat": 1_000_000_000}}))
    assert str(caught.value).splitlines() == [
        f"model.nodes.x.repeat: 1,000,000,000 copies is more than model.max_repeat ({MAX_REPEAT:,})",
        "  hint: set model.max_repeat=1000000000 if the model really has that many"]


def test_a_repeat_from_a_parameter_or_inside_a_composite_is_refused_too() -> None:
    with pytest.raises(ConfigError, match=r"model.nodes.x.repeat: 10,000,000 copies is more than model.max_repeat"):
        build_model(graph({"x": {"block": "nn.ReLU", "repeat": "depth * 10"}}, params={"depth": 1_000_000}))
    with pytest.raises(ConfigError, match=r"model.blocks.inner.nodes.a.repeat: 5,000 copies is more than "
                                          r"model.max_repeat \(1,000\)"):
        build_model(graph({"x": {"block": "inner", "args": {"n": 5000}}}, blocks={"inner": INNER}))


def test_the_node_count_multiplies_copies_and_parts_and_names_the_biggest_node() -> None:
    nodes = {"x": {"block": "inner", "args": {"n": 900}, "repeat": 900}, "y": {"block": "nn.ReLU"}}
    with pytest.raises(ConfigError) as caught:
        build_model(graph(nodes, blocks={"inner": INNER}))
    total = 900 * (1 + 900 + 1) + 1 + 1  # x's copies each with its parts; y; flat
    assert str(caught.value).splitlines()[0] == (
        f"model.nodes.x: the model would have {total:,} nodes (up to {total - 2:,} from node 'x' and its copies and "
        f"parts), more than model.max_nodes ({MAX_NODES:,})")


def test_both_caps_are_settable() -> None:
    nodes = {"x": {"block": "nn.ReLU", "repeat": 1200}}
    with pytest.raises(ConfigError, match="copies is more than model.max_repeat"):
        build_model(graph(nodes))
    model = build_model(graph(nodes, max_repeat=1200))
    assert len(model.nodes.x) == 1200
    c2f_like = {"params": {"n": 1}, "repeats": "n", "nodes": {"m": {"block": "nn.ReLU", "repeat": "n"}}}
    small = graph({"x": {"block": "c", "repeat": 8}}, blocks={"c": c2f_like}, max_nodes=9)
    with pytest.raises(ConfigError, match=r"model.nodes.x: the model would have 10 nodes .*more than "
                                          r"model.max_nodes \(9\)"):
        build_model(small)  # the repeat goes inside (repeats: n): 1 + 8 bottlenecks, and flatten
    assert len(build_model({**small, "max_nodes": 10}).nodes.x.m) == 8


def test_a_count_known_only_while_building_is_checked_while_building() -> None:
    by_width = {"nodes": {"a": {"block": "nn.ReLU", "repeat": "in_channels"}}}  # the input's width: 64
    nodes = {"wide": {"block": "nn.Conv2d", "args": {"out_channels": 64, "kernel_size": 1}},
             "x": {"block": "w"}, "pool": {"block": "global_avg_pool"}}
    with pytest.raises(ConfigError, match=r"model.blocks.w.nodes.a: the model has more than model.max_nodes \(30\) "
                                          r"nodes \[in model.nodes.x\]"):
        build_model(graph(nodes, blocks={"w": by_width}, max_nodes=30))
    with pytest.raises(ConfigError, match=r"model.blocks.w.nodes.a.repeat: 64 copies is more than "
                                          r"model.max_repeat \(50\)"):
        build_model(graph(nodes, blocks={"w": by_width}, max_repeat=50))
    assert build_model(graph(nodes, blocks={"w": by_width}, n_classes=64))(torch.zeros(1, 1, 4, 4)).shape == (1, 64)


@pytest.mark.parametrize("key", ["max_repeat", "max_nodes"])
def test_a_cap_must_be_a_positive_whole_number(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"model.{key}"):
        build_model(graph({"x": {"block": "nn.ReLU"}}, **{key: 0}))
