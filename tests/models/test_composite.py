"""The model language: composite blocks, expressions, conditions, several inputs and outputs, scales."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from modelforge import ConfigError, build_model
from modelforge.models.graph_build import Graph, Repeat
from modelforge.models.scales import Scale

RES = {  # a residual unit whose projection exists only when the width or the stride changes
    "params": {"out_channels": "???", "stride": 1},
    "description": "conv, conv, shortcut, add",
    "nodes": {
        "conv1": {"block": "conv", "args": {"out_channels": "out_channels", "stride": "stride"}},
        "conv2": {"block": "conv", "args": {"out_channels": "out_channels", "activation": None}},
        "proj": {"block": "conv", "args": {"out_channels": "out_channels", "kernel_size": 1, "stride": "stride",
                                           "activation": None},
                 "inputs": ["input"], "when": "stride != 1 or in_channels != out_channels"},
        "add": {"block": "add", "inputs": ["conv2", "proj"]},
    },
}


def graph(nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "nodes": nodes, **extra}


def res_model(**body: Any) -> nn.Module:
    return build_model(graph({
        "stem": {"block": "conv", "args": {"out_channels": 4}},
        "body": {"block": "res", "args": {"out_channels": 8}, "repeat": 3, **body},
        "flat": {"block": "flatten"},
        "head": {"block": "nn.Linear", "args": {"out_features": "n_classes"}},
    }, blocks={"res": RES}), seed=0)


def test_a_repeated_composite_has_dotted_paths_and_a_conditional_projection() -> None:
    model = res_model()
    names = dict(model.named_modules())
    assert isinstance(names["nodes.body"], Repeat) and isinstance(names["nodes.body.1"], Graph)
    assert names["nodes.body.1"].composite_name == "res"
    assert {"nodes.body.0.conv1.conv", "nodes.body.1.conv2.norm", "nodes.body.0.proj.conv"} <= set(names)
    assert "nodes.body.1.proj" not in names  # 8 -> 8, stride 1: the shortcut is the input itself
    assert names["nodes.body.1"].wiring["add"] == [("conv2", ()), ("input", (0,))]
    assert model(torch.zeros(3, 1, 8, 8)).shape == (3, 10)


def test_repeat_index_and_expressions_in_args() -> None:
    model = res_model(args={"out_channels": "4 * 2", "stride": "2 if index == 0 else 1"})
    names = dict(model.named_modules())
    assert names["nodes.body.0.conv1.conv"].stride == (2, 2) and names["nodes.body.1.conv1.conv"].stride == (1, 1)
    assert names["nodes.body.0.proj.conv"].out_channels == 8
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_composite_in_a_composite_and_a_default_from_another_parameter() -> None:
    blocks = {
        "res": RES,
        "pair": {"params": {"width": "???", "wide": "width * 2"},
                 "nodes": {"a": {"block": "res", "args": {"out_channels": "width"}},
                           "b": {"block": "res", "args": {"out_channels": "wide"}}}},
    }
    model = build_model(graph({"p": {"block": "pair", "args": {"width": 3}}}, blocks=blocks), seed=0)
    assert model.nodes.p.b.conv1.conv.out_channels == 6
    assert model(torch.zeros(1, 1, 8, 8)).shape == (1, 6, 8, 8)


def test_tuple_outputs_by_index_and_every_copy_by_star() -> None:
    nodes = {
        "cv1": {"block": "nn.Conv2d", "args": {"out_channels": 8, "kernel_size": 1}},
        "split": {"block": "chunk", "args": {"chunks": 2}},
        "m": {"block": "nn.Conv2d", "args": {"out_channels": 4, "kernel_size": 3, "padding": 1},
              "inputs": ["split.1"], "repeat": 3},
        "cat": {"block": "concat", "inputs": ["split.0", "split.1", "m.*"]},
        "last": {"block": "add", "inputs": ["m", "m.2", "split.0"]},  # `m` alone is its last copy
    }
    model = build_model(graph(nodes, output=["cat", "last"]), seed=0)
    x = torch.randn(2, 1, 8, 8)
    cat, last = model(x)
    assert cat.shape == (2, 4 * 5, 8, 8)
    a, b = model.nodes.cv1(x).chunk(2, 1)
    m0 = model.nodes.m[0](b)
    m2 = model.nodes.m[2](model.nodes.m[1](m0))
    torch.testing.assert_close(cat[:, 8:12], m0)
    torch.testing.assert_close(last, m2 + m2 + a)


def test_lstm_parts_and_self_attention_with_three_inputs() -> None:
    nodes = {
        "rows": {"block": "nn.Flatten", "args": {"start_dim": 1, "end_dim": 2}},
        "lstm": {"block": "nn.LSTM", "args": {"hidden_size": 12, "batch_first": True}},
        "attn": {"block": "nn.MultiheadAttention", "args": {"num_heads": 3, "batch_first": True},
                 "inputs": ["lstm.0", "lstm.0", "lstm.0"]},
        "h": {"block": "select", "args": {"index": -1, "dim": 0}, "inputs": ["lstm.1.0"]},  # h_n of the last layer
        "mix": {"block": "nn.Bilinear", "args": {"out_features": 5},  # in1/in2_features from two inputs
                "inputs": ["h", "pick"]},
        "pick": {"block": "select", "args": {"index": 0, "dim": 1}, "inputs": ["attn.0"]},
    }
    model = build_model(graph(nodes, output="mix", n_classes=5), seed=0)
    assert model.nodes.lstm.input_size == 8 and model.nodes.attn.embed_dim == 12
    assert model.nodes.mix.in1_features == 12 and model.nodes.mix.in2_features == 12
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 5)


@pytest.mark.parametrize(("nodes", "blocks", "message"), [
    ({"b": {"block": "res", "args": {"out_chanels": 8}}}, {"res": RES},
     r"(?s)model.nodes.b.args.out_chanels: composite block 'res' has no parameter 'out_chanels'"
     r".*did you mean 'out_channels'"),
    ({"b": {"block": "res"}}, {"res": RES}, r"model.nodes.b.args.out_channels: missing: composite block 'res' needs"),
    ({"b": {"block": "res", "args": {"out_channels": 8}}},
     {"res": {**RES, "nodes": {**RES["nodes"], "conv1": {"block": "conv", "args": {"out_channels": "out_chanels"}}}}},
     r"(?s)model.blocks.res.nodes.conv1.args.out_channels: 'out_chanels' is not a parameter here"
     r".*did you mean 'out_channels'"),
    ({"b": {"block": "res", "args": {"out_channels": 8}}},
     {"res": {**RES, "nodes": {**RES["nodes"], "conv1": {"block": "conv", "args": {"out_channels": "out_channels.real"}}}}},
     r"model.blocks.res.nodes.conv1.args.out_channels: expression 'out_channels.real': .* is not allowed"),
    ({"b": {"block": "x"}}, {"x": {"nodes": {"a": {"block": "y"}}}, "y": {"nodes": {"a": {"block": "x"}}}},
     r"model.blocks.y.nodes.a.block: composite blocks use each other in a cycle: x -> y -> x"),
    ({"b": {"block": "resx"}}, {"res": RES}, r"(?s)model.nodes.b.block: unknown block 'resx'.*did you mean 'res'"),
    ({"b": {"block": "conv"}}, {"conv": RES}, r"model.blocks.conv: composite 'conv' has the name of a registered block"),
    ({"b": {"block": "r"}}, {"r": {"repeats": "n", "nodes": {"a": {"block": "nn.ReLU"}}}},
     r"model.blocks.r.repeats: 'n' is not a parameter of 'r'"),
])
def test_composite_errors_name_the_path(nodes: dict, blocks: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model(graph(nodes, blocks=blocks))


def test_a_shape_mismatch_inside_a_composite_names_the_node_the_shapes_and_the_use() -> None:
    bad = {**RES, "nodes": {**RES["nodes"], "proj": {"block": "nn.Identity", "inputs": ["input"]}}}
    with pytest.raises(ConfigError, match=r"model.blocks.res.nodes.add: node 'add' cannot add inputs of shapes "
                                          r"conv2 \[2, 8, 8, 8\], proj \[2, 4, 8, 8\] \[in model.nodes.body\[0\]\]"):
        build_model(graph({"stem": {"block": "conv", "args": {"out_channels": 4}},
                           "body": {"block": "res", "args": {"out_channels": 8}, "repeat": 2}}, blocks={"res": bad}))


def test_reading_a_tuple_whole_or_past_its_end_is_an_error_with_a_hint() -> None:
    lstm = {"rows": {"block": "nn.Flatten", "args": {"start_dim": 1, "end_dim": 2}},
            "lstm": {"block": "nn.LSTM", "args": {"hidden_size": 4, "batch_first": True}}}
    with pytest.raises(ConfigError, match=r"(?s)model.nodes.last: node 'last' \(select\) does not fit its input lstm "
                                          r"\(\[2, 8, 4\], \(\[1, 2, 4\], \[1, 2, 4\]\)\).*hint: lstm is a tuple: read one part, e\.g\. lstm\.0"):
        build_model(graph({**lstm, "last": {"block": "select", "args": {"index": -1}}}))
    with pytest.raises(ConfigError, match=r"model.nodes.last.inputs\[0\]: cannot read 'lstm.2': 'lstm' gives 2 parts"):
        build_model(graph({**lstm, "last": {"block": "select", "inputs": ["lstm.2"]}}))


def test_scale_rules_as_ultralytics() -> None:
    n = Scale(depth=0.33, width=0.25, max_channels=1024)
    assert [n.repeats(r) for r in (1, 2, 3, 6, 9)] == [1, 1, 1, 2, 3]
    assert [n.channels(c) for c in (64, 100, 1024, 2048)] == [16, 32, 256, 256]
    x = Scale(depth=1.0, width=1.25, max_channels=1024)
    assert [x.channels(c) for c in (64, 1024)] == [80, 1280] and x.repeats(3) == 3


def test_a_scale_multiplies_top_level_repeats_and_out_channels_only() -> None:
    cfg = graph({"a": {"block": "conv", "args": {"out_channels": 64}, "repeat": 3},
                 "b": {"block": "res", "args": {"out_channels": 32}}},
                blocks={"res": RES}, scales={"s": {"depth": 0.5, "width": 0.5, "max_channels": 48}}, scale="s")
    model = build_model(cfg)
    assert len(model.nodes.a) == 2 and model.nodes.a[0].conv.out_channels == 24  # min(64, 48) * 0.5
    assert model.nodes.b.conv1.conv.out_channels == 16  # the composite's inside follows its argument


@pytest.mark.parametrize(("extra", "message"), [
    ({"scales": {"n": [0.33, 0.25, 1024], "s": [0.33, 0.5, 1024]}, "scale": "q"},
     r"(?s)model.scale: unknown scale 'q'.*allowed: n, s"),
    ({"scales": {"n": [0.33, 0.25, 1024]}, "scale": "m"}, r"(?s)model.scale: unknown scale 'm'"),
    ({"scales": {"n": [0.33, 0.25, 1024]}, "scale": None}, r"(?s)model.scale: this model has scales; choose one"),
    ({"scale": "n"}, r"model.scale: this model has no scales table"),
    ({"scales": {"n": {"depth": 0.3, "widht": 0.2}}, "scale": "n"}, r"(?s)model.scales.n.widht: .*did you mean 'width'"),
])
def test_scale_errors(extra: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model(graph({"a": {"block": "nn.ReLU"}}, **extra))


def test_model_params_reach_node_args_and_cannot_shadow_model_options() -> None:
    model = build_model(graph({"a": {"block": "nn.Conv2d", "args": {"out_channels": "w * 2", "kernel_size": 1}}},
                              params={"w": 3}))
    assert model.nodes.a.out_channels == 6
    with pytest.raises(ConfigError, match=r"model.params.n_classes: 'n_classes' is a model option"):
        build_model(graph({"a": {"block": "nn.ReLU"}}, params={"n_classes": 3}))


def test_the_resnet18_file_is_short() -> None:
    from modelforge.config import conf_dir

    lines = (conf_dir() / "model" / "resnet18.yaml").read_text().splitlines()
    assert len([line for line in lines if line.strip() and not line.strip().startswith("#")]) <= 25
