from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from modelforge import ConfigError, UnknownNameError, build_model
from modelforge.models import GraphModel

REPO = Path(__file__).resolve().parents[2]


def _graph(nodes: dict, **extra) -> dict:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "nodes": nodes, **extra}


def test_shipped_residual_example_builds_and_runs() -> None:
    model = build_model(REPO / "conf" / "model" / "graph.yaml")
    assert isinstance(model, GraphModel)
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    assert model.nodes.wiring["skip1"] == [("stem", ()), ("res1b", ())]


def test_skip_connection_adds_the_right_tensors() -> None:
    model = build_model(_graph({
        "a": {"block": "conv", "args": {"out_channels": 4, "norm": False, "activation": None}},
        "b": {"block": "conv", "args": {"out_channels": 4, "norm": False, "activation": None}},
        "sum": {"block": "add", "inputs": ["a", "b"]},
    }))
    x = torch.randn(2, 1, 8, 8)
    a = model.nodes["a"](x)
    torch.testing.assert_close(model(x), a + model.nodes["b"](a))


def test_widths_are_inferred_for_concat() -> None:
    model = build_model(_graph({
        "a": {"block": "conv", "args": {"out_channels": 4}, "inputs": "input"},
        "b": {"block": "conv", "args": {"out_channels": 6}, "inputs": "input"},
        "cat": {"block": "concat", "inputs": ["a", "b"]},
        "c": {"block": "conv", "args": {"out_channels": 2}},
        "flat": {"block": "flatten"},
        "head": {"block": "linear", "args": {"out_features": 3}},
    }, n_classes=3))
    assert model.nodes["c"][0].in_channels == 10
    assert model.nodes["head"][0].in_features == 2 * 8 * 8


def test_cycle_names_its_nodes() -> None:
    with pytest.raises(ConfigError, match=r"model.nodes: the graph has a cycle: a -> b -> a"):
        build_model(_graph({"a": {"block": "conv", "args": {"out_channels": 2}, "inputs": ["b"]},
                            "b": {"block": "conv", "args": {"out_channels": 2}, "inputs": ["a"]}}))


def test_unknown_input_suggests_closest() -> None:
    with pytest.raises(ConfigError, match=r"(?s)model.nodes.b.inputs\[0\]: node 'b' reads 'stemm'.*did you mean 'stem'"):
        build_model(_graph({"stem": {"block": "conv", "args": {"out_channels": 2}},
                            "b": {"block": "flatten", "inputs": ["stemm"]}}))


def test_shape_mismatch_names_the_nodes() -> None:
    with pytest.raises(ConfigError, match=r"model.nodes.s: node 's' cannot add inputs of shapes a \[2, 2, 8, 8\], b \[2, 3, 8, 8\]"):
        build_model(_graph({"a": {"block": "conv", "args": {"out_channels": 2}, "inputs": "input"},
                            "b": {"block": "conv", "args": {"out_channels": 3}, "inputs": "input"},
                            "s": {"block": "add", "inputs": ["a", "b"]}}))


def test_block_that_does_not_fit_its_input_names_node() -> None:
    with pytest.raises(ConfigError, match=r"model.nodes.head: node 'head' \(linear\) does not fit its input a \[2, 2, 8, 8\]"):
        build_model(_graph({"a": {"block": "conv", "args": {"out_channels": 2}},
                            "head": {"block": "linear", "args": {"in_features": 5, "out_features": 3}}}))


def test_unknown_block_and_bad_args() -> None:
    with pytest.raises(UnknownNameError, match=r"(?s)model.nodes.a.block: unknown block 'convv'.*did you mean 'conv'"):
        build_model(_graph({"a": {"block": "convv"}}))
    with pytest.raises(ConfigError, match=r"model.nodes.a.args.out_channel: block 'conv' takes no option 'out_channel'"):
        build_model(_graph({"a": {"block": "conv", "args": {"out_channel": 3}}}))
    with pytest.raises(ConfigError, match=r"(?s)model.nodes.a.input: graph node 'a' has no option 'input'.*did you mean 'inputs'"):
        build_model(_graph({"a": {"block": "conv", "input": ["input"]}}))


def test_dangling_node_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"nodes \['side'\] feed nothing"):
        build_model(_graph({"side": {"block": "flatten", "inputs": "input"},
                            "a": {"block": "conv", "args": {"out_channels": 2}, "inputs": "input"}}))


def test_graph_from_omegaconf() -> None:
    cfg = OmegaConf.create(_graph({"a": {"block": "flatten"}}, n_classes=64))
    assert build_model(cfg)(torch.randn(1, 1, 8, 8)).shape == (1, 64)
