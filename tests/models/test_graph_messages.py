"""Model-language messages an expert user met (issue 33.16): each is one clear error with the way out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelforge import ConfigError, build_model, create_model


def graph(nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "nodes": nodes, **extra}


@pytest.mark.parametrize(("args", "first_line"), [
    ({"out_channels": "w * 1.5"}, "model.nodes.a.args.out_channels: expected int, got float 7.5 (the expression 'w * 1.5')"),
    ({"out_channels": "w // 2.0"}, "model.nodes.a.args.out_channels: expected int, got float 2.0 (the expression 'w // 2.0')"),
    ({"out_channels": 4.0}, "model.nodes.a.args.out_channels: expected int, got float 4.0"),
])
def test_a_width_that_is_not_a_whole_number_is_named_before_torch_sees_it(args: dict, first_line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_model(graph({"a": {"block": "nn.Conv2d", "args": {"kernel_size": 1, **args}}}, params={"w": 5}))
    assert str(caught.value).splitlines() == [
        first_line, "  allowed: int", f"  hint: out_channels takes a whole number: compute it with // and whole numbers "
                    "(c * 3 // 2 rather than c * 1.5)"]


def test_an_unannotated_torch_width_is_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"model.nodes.attn.args.num_heads: expected int or null, got float 1.0 \(the expression 'h \* 0.5'\)"):
        build_model(graph({"rows": {"block": "nn.Flatten", "args": {"start_dim": 1, "end_dim": 2}},
                           "attn": {"block": "nn.MultiheadAttention", "args": {"num_heads": "h * 0.5"},
                                    "inputs": ["rows", "rows", "rows"]}}, params={"h": 2}))


def test_a_tuple_into_multihead_attention_gets_the_tuple_hint() -> None:
    nodes = {"rows": {"block": "nn.Flatten", "args": {"start_dim": 1, "end_dim": 2}},
             "lstm": {"block": "nn.LSTM", "args": {"hidden_size": 8, "batch_first": True}},
             "attn": {"block": "nn.MultiheadAttention", "args": {"num_heads": 2, "batch_first": True},
                      "inputs": ["lstm", "lstm", "lstm"]}}
    with pytest.raises(ConfigError) as caught:
        build_model(graph(nodes))
    first, hint = str(caught.value).splitlines()
    assert first.startswith("model.nodes.attn: node 'attn' (nn.MultiheadAttention) does not fit its input "
                            "lstm ([2, 8, 8], ([1, 2, 8], [1, 2, 8])), lstm ")
    assert hint == "  hint: lstm is a tuple: read one part, e.g. lstm.0"


@pytest.mark.parametrize(("block", "suggestion", "hint"), [
    ("relu", "nn.ReLU", "  hint: the activation 'relu' is also {block: activation, args: {spec: relu}}"),
    ("batchnorm2d", "nn.BatchNorm2d", None),
    ("Conv2d", "nn.Conv2d", None),
])
def test_a_torch_nn_name_in_the_wrong_case_suggests_the_class(block: str, suggestion: str, hint: str | None) -> None:
    with pytest.raises(ConfigError) as caught:
        build_model(graph({"a": {"block": block}}))
    lines = str(caught.value).splitlines()
    assert lines[:2] == [f"model.nodes.a.block: unknown block {block!r}", f"  did you mean {suggestion!r}?"]
    assert (lines[-1] if hint else None) == hint


def test_a_scale_in_the_wrong_case_suggests_the_scale() -> None:
    with pytest.raises(ConfigError, match=r"(?s)model.scale: unknown scale 'N'.*did you mean 'n'\?"):
        build_model(graph({"a": {"block": "nn.ReLU"}}, scales={"n": [0.33, 0.25, 1024], "s": [0.33, 0.5, 1024]},
                          scale="N"))


BLOCKS_FILE = """\
# two composites
res:
  params: {width: '???'}
  nodes:
    conv: {block: conv, args: {out_channels: width}}
    add:  {block: add, inputs: [input, conv]}
"""
MODEL_FILE = """\
defaults:
  - /model_defaults/graph@_here_
  - /blocks/mine@blocks
  - _self_
name: graph
nodes:
  body: {block: res, args: {width: 4}}
  flat: {block: flatten}
"""


def test_an_error_inside_a_composite_names_the_file_and_line_of_its_definition(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "blocks").mkdir()
    (tmp_path / "blocks" / "mine.yaml").write_text(BLOCKS_FILE)
    (tmp_path / "model" / "m.yaml").write_text(MODEL_FILE)
    with pytest.raises(ConfigError) as caught:
        create_model("m", config_dir=tmp_path)  # 1 -> 4 channels: add cannot add the input
    assert str(caught.value).endswith(f"[in model.nodes.body] (defined at {tmp_path / 'blocks' / 'mine.yaml'}:6)")


def test_a_composite_in_the_model_file_itself_is_found_there(tmp_path: Path) -> None:
    model = tmp_path / "m.yaml"
    model.write_text("name: graph\nblocks:\n" + "".join(f"  {line}\n" for line in BLOCKS_FILE.splitlines()[1:])
                     + "nodes:\n  body: {block: res, args: {width: widht}}\n  flat: {block: flatten}\n")
    with pytest.raises(ConfigError) as caught:
        build_model(model)
    assert str(caught.value).splitlines() == [
        "model.blocks.res.nodes.conv.args.out_channels: expected int, got str 'widht' (the expression 'width') "
        f"[in model.nodes.body] (defined at {model}:6)",
        "  allowed: int",
        "  hint: out_channels takes a whole number: a word that names no parameter stays a word "
        "(is a parameter's name misspelt?)"]


@pytest.mark.parametrize(("value", "message"), [
    ("lambda i: i", "model.nodes.c.args.value: node 'c' (constant): formula 'lambda i: ...' takes 1 indices"),
    ("lambda i, j: i // 0", "model.nodes.c.args.value: node 'c' (constant): expression 'i // 0': division by zero"),
])
def test_a_formulas_error_names_its_path_once(value: str, message: str) -> None:
    """Issue 49: a formula carries the path it was written at; the node's error does not prefix it again."""
    with pytest.raises(ConfigError) as caught:
        build_model({"name": "graph", "nodes": {"c": {"block": "constant", "inputs": [],
                                                      "args": {"shape": [2, 3], "value": value}}}})
    assert str(caught.value).startswith(message)
