"""Scales: the class count is never scaled, a composite's declared widths are, and a head of the wrong width is refused
where a classifier is trained."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from modelforge import ConfigError, build_model
from modelforge.inspect.summary import format_summary, summarize
from modelforge.models.heads import check_classifier_output

SCALES = {"n": [0.33, 0.25, 1024], "s": [0.33, 0.5, 1024], "m": [0.67, 0.75, 1024], "l": [1.0, 1.0, 1024],
          "x": [1.0, 1.25, 1024]}
GATE = {  # squeeze-and-excitation with a declared width and an undeclared one
    "params": {"channels": "???", "hidden": 24},
    "widths": ["channels"],
    "nodes": {
        "pool": {"block": "mean", "args": {"dim": [2, 3], "keepdim": True}},
        "reduce": {"block": "nn.Conv2d", "args": {"out_channels": "channels", "kernel_size": 1}},
        "mid": {"block": "nn.Conv2d", "args": {"out_channels": "hidden", "kernel_size": 1}},
        "expand": {"block": "nn.Conv2d", "args": {"out_channels": "in_channels", "kernel_size": 1}},
        "gate": {"block": "nn.Sigmoid"},
        "scale": {"block": "mul", "inputs": ["input", "gate"]},
    },
}


def conv_head_model(scale: str, head: Any = "n_classes", **extra: Any) -> dict[str, Any]:
    """A 1x1-conv classifier head after a scaled body, as a user writes one."""
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "scales": SCALES, "scale": scale,
            "blocks": {"gate": GATE}, **extra,
            "nodes": {"stem": {"block": "conv", "args": {"out_channels": 64, "stride": 2}},
                      "se": {"block": "gate", "args": {"channels": 64}},
                      "body": {"block": "conv", "args": {"out_channels": 128}, "repeat": 3},
                      "head": {"block": "nn.Conv2d", "args": {"out_channels": head, "kernel_size": 1}},
                      "pool": {"block": "global_avg_pool"},
                      "flat": {"block": "flatten"}}}


@pytest.mark.parametrize(("scale", "width"), [("n", 16), ("s", 32), ("m", 48), ("l", 64), ("x", 80)])
def test_every_scale_keeps_the_class_count_and_scales_declared_widths(scale: str, width: int) -> None:
    model = build_model(conv_head_model(scale), seed=0)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    assert model.nodes.head.out_channels == 10
    assert model.nodes.stem.conv.out_channels == width and model.nodes.se.reduce.out_channels == width
    assert model.nodes.se.mid.out_channels == 24  # `hidden` is not in the composite's widths
    rows = {r.name: r.output_shape for r in summarize(model, model.input_shape)}
    assert rows["nodes.se.reduce"] == f"[2, {width}, 1, 1]" and rows["nodes.body.0"] == f"[2, {2 * width}, 4, 4]"
    assert rows["(model)"] == "[2, 10]"


def test_a_width_computed_from_n_classes_is_not_scaled_either() -> None:
    cfg = conv_head_model("n")
    nodes = list(cfg["nodes"].items())
    cfg["nodes"] = dict([*nodes[:3], ("wide", {"block": "conv", "args": {"out_channels": "n_classes * 3"}}), *nodes[3:]])
    model = build_model(cfg, seed=0)
    assert model.nodes.wide.conv.out_channels == 30  # and not ceil(30 * 0.25 / 8) * 8 = 8


def test_a_head_of_another_width_than_the_class_count_builds_and_is_one_error_for_a_classifier() -> None:
    model = build_model(conv_head_model("n", head=16))  # scaled to 8: built as written
    assert model(torch.zeros(2, *model.input_shape)).shape == (2, 8)
    with pytest.raises(ConfigError) as caught:
        check_classifier_output(model, 10)
    assert str(caught.value).splitlines()[0] == (
        "model.nodes.flat: the output node 'flat' gives 8 values per sample, but the data has 10 classes "
        "(model.n_classes)")
    with pytest.raises(ConfigError, match=r"the output node 'flat' gives 16 values per sample, but the data has 10"):
        check_classifier_output(build_model(conv_head_model("l", head=16)), 10)


def test_a_declared_width_that_is_not_a_parameter_is_refused_with_did_you_mean() -> None:
    cfg = conv_head_model("n")
    cfg["blocks"] = {"gate": {**GATE, "widths": ["chanels"]}}
    with pytest.raises(ConfigError, match=r"(?s)model.blocks.gate.widths\[0\]: 'chanels' is not a parameter of "
                                          r"'gate'.*did you mean 'channels'"):
        build_model(cfg)


def test_summary_of_a_scaled_model_shows_the_scaled_widths() -> None:
    model = build_model(conv_head_model("s"), seed=0)
    text = format_summary(model, summarize(model, model.input_shape), model.input_shape, expand=True)
    assert re.search(r"nodes\.se\.reduce\s+Conv2d\s+\[2, 32, 1, 1\]", text), text
    assert re.search(r"nodes\.stem\.conv\s+Conv2d\s+\[2, 32, 4, 4\]", text), text
    assert re.search(r"nodes\.head\s+Conv2d\s+\[2, 10, 4, 4\]", text), text
