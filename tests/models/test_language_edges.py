"""The model language's sharp edges (issue 39.4, 38): .N on a tensor, forward keyword arguments, params as
expressions, a model file without its defaults line, a defaults list that includes itself, `list` in 100 columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from modelforge import ConfigError, build_model, create_model


def graph(nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "nodes": nodes, **extra}


POOL_DOT_0 = {"conv": {"block": "conv", "args": {"out_channels": 4}}, "pool": {"block": "global_avg_pool"},
              "head": {"block": "nn.Linear", "args": {"out_features": "n_classes"}, "inputs": ["pool.0"]}}


def test_dot_n_on_a_tensor_is_refused_while_building() -> None:
    with pytest.raises(ConfigError) as caught:
        build_model(graph(POOL_DOT_0))
    assert str(caught.value).splitlines()[0] == (
        "model.nodes.head.inputs[0]: cannot read 'pool.0': 'pool' gives one tensor, not parts ([2, 4, 1, 1]); "
        ".N reads a part of a tuple")


def test_dot_n_on_a_tensor_exits_2_from_the_cli(tmp_path: Path, run_main) -> None:
    (tmp_path / "model").mkdir()
    lines = ["defaults:", "  - /model_defaults/graph@_here_", "  - _self_", "name: graph", "nodes:",
             *(f"  {name}: {spec}" for name, spec in POOL_DOT_0.items())]
    (tmp_path / "model" / "dot.yaml").write_text("\n".join(lines).replace("'", "") + "\n")
    result = run_main("summary", "--config-dir", str(tmp_path), "model=dot")
    assert result.returncode == 2
    assert result.stderr.startswith("error: model.nodes.head.inputs[0]: cannot read 'pool.0': 'pool' gives one tensor")


class _Keyworded(nn.Module):
    def forward(self, x: torch.Tensor, *, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return x * scale + shift


def test_a_node_passes_keyword_arguments_to_its_forward() -> None:
    nodes = {"rows": {"block": "nn.Flatten", "args": {"start_dim": 1, "end_dim": 2}},       # [B, 8, 8]
             "attn": {"block": "nn.MultiheadAttention", "args": {"num_heads": 2, "batch_first": True},
                      "inputs": ["rows", "rows", "rows"], "kwargs": {"need_weights": False}},
             "out": {"block": "select", "args": {"index": 0, "dim": 1}, "inputs": ["attn.0"]}}
    model = build_model(graph(nodes)).eval()
    x = torch.randn(3, 1, 8, 8)
    rows = x.flatten(1, 2)
    with torch.no_grad():
        expected = model.nodes.attn(rows, rows, rows, need_weights=False)[0][:, 0]
        assert torch.equal(model(x), expected)
    assert "attn(**{'need_weights': False})" in repr(model.nodes)


def test_keyword_arguments_are_checked_against_the_forward() -> None:
    nodes = {"rows": {"block": "nn.Flatten", "args": {"start_dim": 1, "end_dim": 2}},
             "attn": {"block": "nn.MultiheadAttention", "args": {"num_heads": 2, "batch_first": True},
                      "inputs": ["rows", "rows", "rows"], "kwargs": {"need_weight": False}}}
    with pytest.raises(ConfigError, match=r"(?s)model.nodes.attn.kwargs.need_weight: the forward of block "
                                          r"'nn.MultiheadAttention' takes no keyword argument 'need_weight'.*"
                                          r"did you mean 'need_weights'"):
        build_model(graph(nodes))
    blocks = {"twice": {"params": {}, "nodes": {"a": {"block": "nn.ReLU"}}}}
    with pytest.raises(ConfigError, match=r"model.nodes.t.kwargs: composite block 'twice' takes no forward keyword"):
        build_model(graph({"t": {"block": "twice", "kwargs": {"inplace": True}}}, blocks=blocks))


def test_params_are_expressions_of_the_model_options_and_earlier_params() -> None:
    cfg = graph({"conv": {"block": "nn.Conv2d", "args": {"out_channels": "width", "kernel_size": 1}},
                 "split": {"block": "split", "args": {"sizes": "sizes", "dim": 1}}},
                input_size=[16, 24], params={"width": "(min(input_size) + 7) // 8 * 4",  # (16 + 7) // 8 * 4 = 8
                                             "sizes": ["width // 2", "width - width // 2"]})
    model = build_model(cfg)
    assert model.nodes.conv.out_channels == 8 and model.nodes.split.sizes == [4, 4]
    with pytest.raises(ConfigError, match=r"model.params.width: expression 'size \* 2 \+ sise': unknown parameter "
                                          r"'sise'"):
        build_model(graph({"a": {"block": "nn.ReLU"}}, params={"size": 2, "width": "size * 2 + sise"}))


DEFAULTLESS = "name: graph\nnodes:\n  body: {block: conv, args: {out_channels: 4}}\n  flat: {block: flatten}\n"
LOOPING = "defaults:\n  - /blocks/loop@_here_\n  - _self_\nres:\n  params: {w: 4}\n  nodes:\n    c: {block: conv, args: {out_channels: w}}\n"
USES_LOOP = ("defaults:\n  - /model_defaults/graph@_here_\n  - /blocks/loop@blocks\n  - _self_\nname: graph\nnodes:\n"
             "  body: {block: res}\n  flat: {block: flatten}\n")


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "blocks").mkdir()
    (tmp_path / "model" / "nodefaults.yaml").write_text(DEFAULTLESS)
    (tmp_path / "model" / "looped.yaml").write_text(USES_LOOP)
    (tmp_path / "blocks" / "loop.yaml").write_text(LOOPING)
    return tmp_path


def test_a_model_file_without_its_defaults_line_is_told_the_line(configs: Path, run_main) -> None:
    line = (f"{configs / 'model' / 'nodefaults.yaml'} has no `- /model_defaults/graph@_here_` in its defaults list, "
            "the line that gives a model file its keys (in_channels, input_size, n_classes, ...): start the file "
            "with `defaults: [/model_defaults/graph@_here_, _self_]`")
    with pytest.raises(ConfigError) as caught:
        create_model("nodefaults", ["in_channels=3"], config_dir=configs)
    assert str(caught.value).splitlines()[0] == ("in_channels: cannot override it: model 'nodefaults' has no key "
                                                 "'in_channels'")
    assert str(caught.value).splitlines()[-1] == f"  hint: {line}"
    result = run_main("summary", "--config-dir", str(configs), "model=nodefaults", "model.in_channels=3")
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == f"  hint: {line}"


def test_a_defaults_list_that_includes_itself_is_one_error(configs: Path, run_main) -> None:
    expected = [f"{configs / 'blocks' / 'loop.yaml'}: the defaults list includes the file itself: blocks/loop -> "
                "blocks/loop", "  hint: remove that entry: a config file cannot be composed from itself"]
    with pytest.raises(ConfigError) as caught:
        create_model("looped", config_dir=configs)
    assert str(caught.value).splitlines() == expected
    result = run_main("summary", "--config-dir", str(configs), "model=looped")
    assert result.returncode == 2 and result.stderr.splitlines() == [f"error: {expected[0]}", expected[1]]
    assert "Traceback" not in result.stderr


def test_list_fits_100_columns(run_main) -> None:
    result = run_main("list")
    assert result.returncode == 0
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    blocks = run_main("list", "blocks").stdout.splitlines()
    at = blocks.index("  inverted_residual(out_channels, expand_ratio=1, expanded=in_channels * expand_ratio,")
    assert blocks[at + 1].startswith("    kernel_size=3")  # the name's parameters wrap under it
    assert blocks[at + 3].startswith(" " * 28 + "1x1 expansion")  # then its description, in the text column


def test_modules_are_in_the_order_the_nodes_run() -> None:
    """Documented (issue 49): the YAML's order, except that a node read by one above it runs, and is listed, first;
    the state_dict follows."""
    model = build_model({"name": "graph", "output": "c", "nodes": {
        "x": {"block": "flatten", "inputs": ["input"]},
        "c": {"block": "nn.Linear", "args": {"out_features": 3}, "inputs": ["b"]},
        "y": {"block": "nn.Linear", "args": {"out_features": 5}, "inputs": ["x"]},
        "b": {"block": "nn.ReLU", "inputs": ["y"]}}})
    assert list(model.nodes) == ["x", "y", "b", "c"]
    assert list(model.state_dict()) == ["nodes.y.weight", "nodes.y.bias", "nodes.c.weight", "nodes.c.bias"]
