"""Graph nodes that name torch.nn modules, repeated nodes, and names that must never resolve."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from modelforge import ConfigError, build_model
from modelforge.config import conf_dir


def _graph(nodes: dict, **extra) -> dict:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "nodes": nodes, **extra}


def test_torch_nn_nodes_infer_their_widths() -> None:
    model = build_model(_graph({
        "conv": {"block": "nn.Conv2d", "args": {"out_channels": 6, "kernel_size": 3, "padding": 1}},
        "bn": {"block": "torch.nn.BatchNorm2d"},
        "gn": {"block": "nn.GroupNorm", "args": {"num_groups": 2}},
        "act": {"block": "nn.ReLU"},
        "drop": {"block": "nn.Dropout2d", "args": {"p": 0.5}},
        "ln": {"block": "nn.LayerNorm"},
        "flat": {"block": "nn.Flatten"},
        "bn1": {"block": "nn.BatchNorm1d"},
        "head": {"block": "nn.Linear", "args": {"out_features": 3}},
    }, n_classes=3))
    nodes = model.nodes
    assert (nodes["conv"].in_channels, nodes["conv"].out_channels) == (1, 6)
    assert nodes["bn"].num_features == 6 and nodes["gn"].num_channels == 6
    assert nodes["ln"].normalized_shape == (6, 8, 8)  # all dims but the batch
    assert nodes["bn1"].num_features == 6 * 8 * 8 and nodes["head"].in_features == 6 * 8 * 8
    assert isinstance(nodes["act"], nn.ReLU) and nodes["drop"].p == 0.5
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 3)


def test_given_width_is_kept() -> None:
    model = build_model(_graph({"ln": {"block": "nn.LayerNorm", "args": {"normalized_shape": [8]}}}))
    assert model.nodes["ln"].normalized_shape == (8,)


def test_repeat_stacks_copies_with_their_own_parameters() -> None:
    model = build_model(_graph({
        "blk": {"block": "nn.Conv2d", "args": {"out_channels": 4, "kernel_size": 3, "padding": 1}, "repeat": 3},
        "res": {"block": "conv", "args": {"out_channels": 5}, "repeat": 2},
    }))
    names = [n for n, _ in model.named_modules()]
    assert {"nodes.blk.0", "nodes.blk.1", "nodes.blk.2", "nodes.res.0", "nodes.res.1"} <= set(names)
    blk = model.nodes["blk"]
    assert [(c.in_channels, c.out_channels) for c in blk] == [(1, 4), (4, 4), (4, 4)]
    assert blk[1].weight.data_ptr() != blk[2].weight.data_ptr()
    assert not torch.equal(blk[1].weight, blk[2].weight)  # drawn separately
    x = torch.randn(2, 1, 8, 8)
    torch.testing.assert_close(model(x), model.nodes["res"](blk[2](blk[1](blk[0](x)))))
    model(x).sum().backward()
    assert all(c.weight.grad is not None for c in blk)


def test_shipped_nn_example_builds_with_repeat() -> None:
    model = build_model(conf_dir() / "model" / "graph_nn.yaml", seed=0)
    assert isinstance(model.nodes["stem"], nn.Conv2d) and len(model.nodes["body"]) == 2
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)


@pytest.mark.parametrize("name", ["os.system", "subprocess.Popen", "builtins.eval", "torch.load",
                                  "torch.nn.functional.relu", "nn.functional", "nn.init.zeros_", "nn.Module.__init__",
                                  "torch.nn.modules.conv.Conv2d", "nn.parameter.Parameter", "nn.Parameter"])
def test_names_outside_torch_nn_modules_are_refused_with_the_node(name: str) -> None:
    with pytest.raises(ConfigError, match=r"^model\.nodes\.evil\.block: "):
        build_model(_graph({"ok": {"block": "flatten"}, "evil": {"block": name}}))


def test_a_refused_name_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "mf_evil_mod.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nclass Layer: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"model\.nodes\.a\.block: 'mf_evil_mod\.Layer' is not a registered block"):
        build_model(_graph({"a": {"block": "mf_evil_mod.Layer"}}))
    assert not marker.exists() and "mf_evil_mod" not in sys.modules


def test_unknown_nn_name_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"(?s)model.nodes.a.block: unknown torch.nn module 'nn.Conv2D'.*did you mean 'nn.Conv2d'"):
        build_model(_graph({"a": {"block": "nn.Conv2D", "args": {"out_channels": 2}}}))
    with pytest.raises(ConfigError, match=r"(?s)model.nodes.a.block: unknown block 'BatchNorm2d'.*did you mean 'nn.BatchNorm2d'"):
        build_model(_graph({"a": {"block": "BatchNorm2d"}}))


def test_bad_args_of_a_torch_nn_module() -> None:
    with pytest.raises(ConfigError, match=r"(?s)model.nodes.a.args.kernal_size: block 'nn.Conv2d' takes no option "
                                          r"'kernal_size'.*did you mean 'kernel_size'"):
        build_model(_graph({"a": {"block": "nn.Conv2d", "args": {"out_channels": 2, "kernal_size": 3}}}))
    with pytest.raises(ConfigError, match=r"model.nodes.a: node 'a' \(nn.Conv2d\): .*kernel_size"):
        build_model(_graph({"a": {"block": "nn.Conv2d", "args": {"out_channels": 2}}}))
    with pytest.raises(ConfigError, match=r"model.nodes.a: node 'a' \(nn.Conv2d\) does not fit its input input \[2, 1, 8, 8\]"):
        build_model(_graph({"a": {"block": "nn.Conv2d", "args": {"out_channels": 2, "kernel_size": 20}}}))


def test_bad_repeat() -> None:
    with pytest.raises(ConfigError, match=r"model.nodes.a.repeat: must be positive, got 0"):
        build_model(_graph({"a": {"block": "nn.ReLU", "repeat": 0}}))
    with pytest.raises(ConfigError, match=r"(?s)model.nodes.a.repeat: expression 'two': unknown parameter 'two'.*allowed: in_channels"):
        build_model(_graph({"a": {"block": "nn.ReLU", "repeat": "two"}}))
    with pytest.raises(ConfigError, match=r"model.nodes.s.repeat: node 's' reads 2 inputs"):
        build_model(_graph({"a": {"block": "nn.ReLU"}, "b": {"block": "nn.Tanh", "inputs": "input"},
                            "s": {"block": "add", "inputs": ["a", "b"], "repeat": 2}}))
