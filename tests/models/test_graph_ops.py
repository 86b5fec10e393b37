"""The ops in graphs: shapes inferred, MACs counted as torch counts them, arguments and wiring checked."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from modelforge import ConfigError, build_model
from modelforge.inspect.flops import _countable, forward_macs, macs_by_module
from modelforge.inspect.summary import format_summary, summarize


def graph(nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 2, "input_size": [4, 6], "nodes": nodes, **extra}


# Every op once: a gate (mean, mul), sub/div, channels-last (permute), tokens (reshape), scores (matmul,
# softmax), a learned scale (parameter) and flatten(start_dim, end_dim); output [B, n_classes].
EVERY_OP = {
    "conv": {"block": "nn.Conv2d", "args": {"out_channels": 8, "kernel_size": 1}},       # [B, 8, 4, 6]
    "pool": {"block": "mean", "args": {"dim": [2, 3], "keepdim": True}},                  # [B, 8, 1, 1]
    "gate": {"block": "nn.Sigmoid"},
    "gated": {"block": "mul", "inputs": ["conv", "gate"]},                                # [B, 8, 4, 6]
    "centred": {"block": "sub", "inputs": ["gated", "pool"]},
    "ratio": {"block": "div", "inputs": ["centred", "gate"]},
    "last": {"block": "permute", "args": {"dims": [0, 2, 3, 1]}},                         # [B, 4, 6, 8]
    "tokens": {"block": "reshape", "args": {"shape": [-1, 8]}},                           # [B, 24, 8]
    "scores": {"block": "matmul", "args": {"transpose_b": True, "scaled": True}, "inputs": ["tokens", "tokens"]},
    "weights": {"block": "softmax"},                                                      # [B, 24, 24]
    "mixed": {"block": "matmul", "inputs": ["weights", "tokens"]},                        # [B, 24, 8]
    "gamma": {"block": "parameter", "args": {"shape": [8], "init": "ones"}, "inputs": []},
    "scaled": {"block": "mul", "inputs": ["mixed", "gamma"]},
    "flat": {"block": "flatten", "args": {"start_dim": 1, "end_dim": 2}},                 # [B, 192]
    "head": {"block": "nn.Linear", "args": {"out_features": "n_classes"}},
}


def test_every_op_infers_its_shape_and_computes_what_torch_computes() -> None:
    model = build_model(graph(EVERY_OP), seed=0)
    x = torch.randn(3, 2, 4, 6)
    conv = model.nodes.conv(x)
    pool = conv.mean((2, 3), keepdim=True)
    gate = pool.sigmoid()
    ratio = (conv * gate - pool) / gate
    tokens = ratio.permute(0, 2, 3, 1).reshape(3, 24, 8)
    weights = (tokens @ tokens.transpose(1, 2) / 8 ** 0.5).softmax(-1)
    torch.testing.assert_close(model(x), model.nodes.head((weights @ tokens).flatten(1)))
    rows = {r.name: r.output_shape for r in summarize(model, model.input_shape)}
    assert rows["nodes.pool"] == "[2, 8, 1, 1]" and rows["nodes.tokens"] == "[2, 24, 8]"
    assert rows["nodes.scores"] == "[2, 24, 24]" and rows["nodes.gamma"] == "[8]" and rows["nodes.flat"] == "[2, 192]"


def test_matmul_macs_are_counted_as_flop_counter_counts_them() -> None:
    model = build_model(graph(EVERY_OP), seed=0)
    assert all(_countable(m) for m in model.modules())  # no FlopCounterMode needed
    hooks = forward_macs(model, lambda: model.eval()(torch.zeros(2, 2, 4, 6)), 2)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.eval()(torch.zeros(2, 2, 4, 6))
    assert hooks == macs_by_module(model, counter.get_flop_counts(), 2)
    assert hooks["nodes.scores"] == hooks["nodes.mixed"] == 24 * 24 * 8  # per sample: out elements x shared dim
    text = format_summary(model, summarize(model, model.input_shape), model.input_shape)
    assert f"Total MACs: {2 * 4 * 6 * 8 + 2 * 24 * 24 * 8 + 192 * 10:,} per sample" in text


@pytest.mark.parametrize(("block", "args", "message"), [
    ("matmul", {"transpose": True}, r"(?s)model.nodes.op.args.transpose: block 'matmul' takes no option 'transpose'"
                                    r".*did you mean 'transpose_b'"),
    ("mean", {"dim": 1, "keep_dim": True}, r"(?s)block 'mean' takes no option 'keep_dim'.*did you mean 'keepdim'"),
    ("reshape", {"shapes": [-1]}, r"(?s)block 'reshape' takes no option 'shapes'.*did you mean 'shape'"),
    ("permute", {"dim": [0, 1]}, r"(?s)block 'permute' takes no option 'dim'.*did you mean 'dims'"),
    ("softmax", {"dims": 1}, r"(?s)block 'softmax' takes no option 'dims'.*did you mean 'dim'"),
    ("flatten", {"start": 2}, r"(?s)block 'flatten' takes no option 'start'.*did you mean 'start_dim'"),
    ("mul", {"factor": 2}, r"(?s)block 'mul' takes no option 'factor'.*allowed: scalar, outer"),
    ("parameter", {"shap": [3]}, r"(?s)block 'parameter' takes no option 'shap'.*did you mean 'shape'"),
    ("reshape", {"shape": [-1, -1]}, r"(?s)model.nodes.op.args.shape: node 'op' \(reshape\): cannot reshape to "
                                     r"\[-1, -1\].*allowed: sizes >= 1, at most one -1"),
    ("parameter", {"shape": [3], "init": "zeroes"},
     r"(?s)model.nodes.op.args.init: node 'op' \(parameter\): unknown initializer 'zeroes'.*did you mean 'zeros'"),
])
def test_op_arguments_are_checked_with_did_you_mean(block: str, args: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model(graph({"op": {"block": block, "args": args}}))


@pytest.mark.parametrize(("nodes", "message"), [
    ({"a": {"block": "nn.Conv2d", "args": {"out_channels": 3, "kernel_size": 1}},
      "b": {"block": "nn.Conv2d", "args": {"out_channels": 5, "kernel_size": 1}, "inputs": ["input"]},
      "m": {"block": "mul", "inputs": ["a", "b"]}},
     r"model.nodes.m: node 'm' cannot multiply inputs that do not broadcast: a \[2, 3, 4, 6\], b \[2, 5, 4, 6\]"),
    ({"a": {"block": "flatten"}, "b": {"block": "mean", "args": {"dim": [2, 3], "keepdim": True}, "inputs": ["input"]},
      "m": {"block": "mul", "inputs": ["a", "b"]}},
     r"node 'm' cannot multiply inputs that broadcast to \[2, 2, 2, 48\], the shape of none of them "
     r"\(outer: true allows it\): "
     r"a \[2, 48\], b \[2, 2, 1, 1\]"),
    ({"m": {"block": "matmul", "inputs": ["input", "input"]}},
     r"node 'm' cannot multiply: the first input's last dimension \(6\) must equal the second's second-to-last \(4\); "
     r"got input \[2, 2, 4, 6\], input \[2, 2, 4, 6\]"),
    ({"s": {"block": "sub", "inputs": ["input", "input", "input"]}},
     r"(?s)model.nodes.s.inputs: block 'sub' takes 2 inputs, got 3"),
    ({"p": {"block": "permute", "args": {"dims": [0, 2, 1]}}},
     r"node 'p' orders 3 dimensions \(\[0, 2, 1\]\), but its input has 4: input \[2, 2, 4, 6\]"),
    ({"r": {"block": "reshape", "args": {"shape": [5, -1]}}},
     r"node 'r' \(reshape\) does not fit its input input \[2, 2, 4, 6\]: shape '\[2, 5, -1\]' is invalid"),
    ({"g": {"block": "parameter", "args": {"shape": [3]}}},
     r"(?s)model.nodes.g.inputs: block 'parameter' reads no input, got 1.*hint: write inputs: \[\] for this node"),
    ({"c": {"block": "nn.Conv2d", "args": {"out_channels": 3, "kernel_size": 1}, "inputs": []}},
     r"model.nodes.c.inputs: node 'c' reads no input, but block 'nn.Conv2d' needs one"),
    ({"a": {"block": "nn.ReLU"},
      "g": {"block": "parameter", "args": {"shape": [3]}, "inputs": [], "when": "false"},
      "m": {"block": "mul", "inputs": ["a", "g"]}},
     r"model.nodes.g.when: node 'g' reads no input, so it cannot be left out"),
])
def test_op_wiring_errors_name_the_node_and_the_shapes(nodes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model(graph(nodes))


def test_a_learned_tensor_trains_and_is_in_the_state_dict() -> None:
    model = build_model(graph({
        "gamma": {"block": "parameter", "args": {"shape": [2, 1, 1], "init": {"name": "constant", "val": 0.5}},
                  "inputs": []},
        "scaled": {"block": "mul", "inputs": ["input", "gamma"]},
        "flat": {"block": "flatten"},
        "head": {"block": "nn.Linear", "args": {"out_features": "n_classes"}},
    }), seed=0)
    assert model.state_dict()["nodes.gamma.weight"].tolist() == [[[0.5]], [[0.5]]]
    model(torch.randn(3, 2, 4, 6)).sum().backward()
    assert model.nodes.gamma.weight.grad is not None and isinstance(model.nodes.gamma.weight, nn.Parameter)
