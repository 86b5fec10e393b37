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
     r"node 'r' cannot reshape 48 values per sample to \[5, -1\]: input \[2, 2, 4, 6\]"),
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


# issue 38: an op over the batch dimension mixes a batch's samples; refused while building, naming the argument
@pytest.mark.parametrize(("op", "message"), [
    ({"block": "permute", "args": {"dims": [1, 0, 2, 3]}},
     r"(?s)^model.nodes.op.args.dims: node 'op' \(permute\): \[1, 0, 2, 3\] moves the batch dimension \(0\) of "
     r"its input to place 1: input \[2, 2, 4, 6\]\n  allowed: an order that keeps 0 first, e.g. \[0, 1, 2, 3\]"),
    ({"block": "mean", "args": {"dim": [0, 2]}},
     r"(?s)model.nodes.op.args.dim: node 'op' \(mean\): dim=\[0, 2\] is the batch dimension of its input: input "
     r"\[2, 2, 4, 6\]\n  allowed: 1 to 3, or -1 to -3 from the end \(0 and -4 are the batch dimension\)"),
    ({"block": "mean", "args": {"dim": -4}}, r"model.nodes.op.args.dim: node 'op' \(mean\): dim=\[-4\] is the batch"),
    ({"block": "softmax", "args": {"dim": 0}}, r"model.nodes.op.args.dim: node 'op' \(softmax\): dim=0 is the batch"),
    ({"block": "sum", "args": {"dim": 0}}, r"model.nodes.op.args.dim: node 'op' \(sum\)"),
    ({"block": "flatten", "args": {"start_dim": 0}}, r"model.nodes.op.args.start_dim: node 'op' \(flatten\): "
                                                       r"start_dim=0 is the batch"),
    ({"block": "nn.Flatten", "args": {"start_dim": 0, "end_dim": 1}}, r"args.start_dim: node 'op' \(nn.Flatten\)"),
    ({"block": "nn.Softmax", "args": {"dim": 0}}, r"args.dim: node 'op' \(nn.Softmax\): dim=0 is the batch"),
    ({"block": "nn.Unflatten", "args": {"dim": 0, "unflattened_size": [1, 2]}},
     r"args.dim: node 'op' \(nn.Unflatten\)"),
    ({"block": "select", "args": {"index": 0, "dim": 0}}, r"args.dim: node 'op' \(select\): dim=0 is the batch"),
    ({"block": "chunk", "args": {"dim": -4}}, r"args.dim: node 'op' \(chunk\)"),
    ({"block": "transpose", "args": {"dim0": 0, "dim1": 1}}, r"args.dim0: node 'op' \(transpose\)"),
    ({"block": "roll", "args": {"shifts": 1, "dims": [2, 0]}}, r"args.dims: node 'op' \(roll\): dims=\[2, 0\] is"),
    ({"block": "slice", "args": {"dims": 0, "end": 1}}, r"args.dims: node 'op' \(slice\)"),
    ({"block": "pad_to_multiple", "args": {"multiple": 4, "dims": 0}}, r"args.dims: node 'op' \(pad_to_multiple\)"),
    ({"block": "unbind", "args": {"dim": 0}}, r"args.dim: node 'op' \(unbind\)"),
    ({"block": "concat", "args": {"dim": 0}, "inputs": ["input", "input"]}, r"args.dim: node 'op' \(concat\)"),
])
def test_an_op_over_the_batch_dimension_is_refused_naming_the_argument(op: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model(graph({"op": op}))


def test_an_op_inside_a_composite_is_refused_where_it_is_used() -> None:
    blocks = {"bad": {"nodes": {"m": {"block": "mean", "args": {"dim": 0}}}}}
    with pytest.raises(ConfigError, match=r"^model.blocks.bad.nodes.m.args.dim: node 'm' \(mean\): dim=\[0\] is the "
                                          r"batch dimension of its input: input \[2, 2, 4, 6\] \[in model.nodes.b\]"):
        build_model(graph({"b": {"block": "bad"}}, blocks=blocks))


def test_ops_over_tensors_without_a_batch_dimension_use_every_dimension() -> None:
    """A parameter or a constant has no batch dimension: a permute, a mean or a take over its dim 0 is fine
    (Swin's relative position bias permutes a looked-up table), and so is dim 0 of an RNN's states."""
    model = build_model(graph({
        "table": {"block": "parameter", "args": {"shape": [5, 2], "init": "ones"}, "inputs": []},
        "index": {"block": "constant", "args": {"shape": [4, 6], "value": "lambda i, j: (i + j) % 5"}, "inputs": []},
        "lookup": {"block": "take", "args": {"dim": 0}, "inputs": ["table", "index"]},        # [4, 6, 2]
        "moved": {"block": "permute", "args": {"dims": [2, 0, 1]}},                             # [2, 4, 6]
        "summed": {"block": "sum", "args": {"dim": 0, "keepdim": True}},                        # [1, 4, 6]
        "biased": {"block": "add", "args": {"broadcast": True}, "inputs": ["input", "summed"]},  # [B, 2, 4, 6]
    }), seed=0)
    x = torch.randn(3, 2, 4, 6)
    torch.testing.assert_close(model(x), x + 2.0)


def test_a_part_of_a_tensor_output_is_refused() -> None:
    """`pool.0` on a node that gives a tensor indexed the batch: a head then gave (10,) for a batch of 4."""
    nodes = {"pool": {"block": "mean", "args": {"dim": [2, 3]}},
             "head": {"block": "nn.Linear", "args": {"out_features": "n_classes"}, "inputs": ["pool.0"]}}
    with pytest.raises(ConfigError, match=r"(?s)^model.nodes.head.inputs\[0\]: cannot read 'pool.0': 'pool' gives one "
                                          r"tensor, not parts \(\[2, 2\]\); .N reads a part of a tuple.*hint: read "
                                          r"'pool' whole, or take a part of it with a select"):
        build_model(graph(nodes))
    with pytest.raises(ConfigError, match=r"cannot read 'g.1': 'g' gives one tensor, not parts \(\[3\]\)"):
        build_model(graph({"g": {"block": "parameter", "args": {"shape": [3]}, "inputs": []},
                           "m": {"block": "mul", "inputs": ["input", "g.1"]}}))


# issue 38: a boolean argument takes true or false; the YAML string "false" is refused, not taken as true
@pytest.mark.parametrize(("op", "key", "value"), [
    ({"block": "matmul", "inputs": ["input", "input"]}, "transpose_b", "false"),
    ({"block": "matmul", "inputs": ["input", "input"]}, "scaled", "no"),
    ({"block": "conv", "args": {"out_channels": 4}}, "norm", "yes"),
    ({"block": "nn.LayerNorm", "args": {"normalized_shape": 6}}, "elementwise_affine", "false"),
    ({"block": "nn.MultiheadAttention", "args": {"embed_dim": 6, "num_heads": 1},
      "inputs": ["input", "input", "input"]}, "batch_first", "true"),  # torch.nn's unannotated flags too
    ({"block": "mean", "args": {"dim": 1}}, "keepdim", 1),
    ({"block": "add", "inputs": ["input", "input"]}, "broadcast", "on"),
])
def test_a_boolean_argument_is_checked_as_every_typed_value(op: dict, key: str, value: object) -> None:
    node = {**op, "args": {**op.get("args", {}), key: value}}
    with pytest.raises(ConfigError, match=rf"^model.nodes.op.args.{key}: expected bool( or null)?, got "
                                          rf"{type(value).__name__} {value!r}\n  allowed: bool"):
        build_model(graph({"op": node}))


def test_a_boolean_from_an_expression_and_an_activations_flag() -> None:
    model = build_model(graph({"s": {"block": "matmul", "args": {"transpose_b": "scores > 0", "scaled": True},
                                     "inputs": ["input", "input"]}}, params={"scores": 1}))
    assert model.nodes.s.transpose_b is True
    with pytest.raises(ConfigError, match=r"^model.nodes.c.args.activation.inplace: node 'c' \(conv\): "
                                          r"expected bool, got str 'no'"):
        build_model(graph({"c": {"block": "conv", "args": {"out_channels": 4,
                                                          "activation": {"name": "relu", "inplace": "no"}}}}))


@pytest.mark.parametrize(("nodes", "message"), [
    ({"flat": {"block": "flatten"},
      "gram": {"block": "matmul", "args": {"transpose_b": True}, "inputs": ["flat", "flat"]}},
     r"(?s)^model.nodes.gram.inputs: node 'gram' \(matmul\): its second input's batch dimension would be a dimension "
     r"of the matrices multiplied \(the product sums over the samples\): flat \[2, 48\], flat \[2, 48\]"),
    ({"flat": {"block": "flatten"}, "w": {"block": "parameter", "args": {"shape": [3, 48, 5]}, "inputs": []},
      "m": {"block": "matmul", "inputs": ["flat", "w"]}},
     r"model.nodes.m.inputs: node 'm' \(matmul\): its first input's batch dimension would be a row"),
    ({"flat": {"block": "flatten", "args": {"start_dim": 2}},                                       # [B, 2, 24]
      "w": {"block": "parameter", "args": {"shape": [3, 1, 1, 24]}, "inputs": []},
      "m": {"block": "mul", "args": {"outer": True}, "inputs": ["flat", "w"]}},                  # [3, B, 2, 24]
     r"model.nodes.m.inputs: node 'm' \(mul\): its input 0 has the batch dimension first but 3 dimensions, and the "
     r"result 4: its batch would broadcast along dimension 1, not stay first"),
])
def test_a_product_or_broadcast_that_moves_the_batch_is_refused(nodes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model(graph(nodes))


def test_a_batch_times_a_weight_and_a_bias_of_fewer_dimensions_are_fine() -> None:
    model = build_model(graph({
        "flat": {"block": "flatten"},                                                           # [B, 48]
        "w": {"block": "parameter", "args": {"shape": [48, 10], "init": "ones"}, "inputs": []},
        "m": {"block": "matmul", "inputs": ["flat", "w"]},                                     # [B, 10]
        "b": {"block": "parameter", "args": {"shape": [10], "init": "ones"}, "inputs": []},
        "out": {"block": "add", "args": {"broadcast": True}, "inputs": ["m", "b"]}}), seed=0)
    x = torch.randn(3, 2, 4, 6)
    torch.testing.assert_close(model(x), x.flatten(1).sum(1, keepdim=True).expand(3, 10) + 1)
