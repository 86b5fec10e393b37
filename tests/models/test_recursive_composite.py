"""A composite that uses itself under a `when`: the recursion ends where the condition turns false (a U-Net's
levels), and one that never ends is refused at MAX_NESTING levels; `len` of a list parameter; the segmentation
models written with them (unet; the zoo's FPN heads: tests/models/test_heads.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from modelforge import ConfigError, build_model, create_model
from modelforge.models.graph_bounds import MAX_NESTING

# A chain of `depth` convs, each level holding the next while depth is left: the smallest recursive composite.
CHAIN = {"params": {"depth": "???"},
         "nodes": {"conv": {"block": "nn.Conv2d", "args": {"out_channels": 2, "kernel_size": 1}},
                   "next": {"block": "chain", "args": {"depth": "depth - 1"}, "when": "depth > 1"}}}


def graph(nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "n_classes": None, "nodes": nodes, **extra}


def test_a_recursion_ends_where_its_when_turns_false() -> None:
    model = build_model(graph({"c": {"block": "chain", "args": {"depth": 3}}}, blocks={"chain": CHAIN}), seed=0)
    convs = [name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    assert convs == ["nodes.c.conv", "nodes.c.next.conv", "nodes.c.next.next.conv"]


def test_a_recursion_that_never_ends_is_refused() -> None:
    endless = {**CHAIN, "nodes": {**CHAIN["nodes"], "next": {**CHAIN["nodes"]["next"], "when": "depth > -1000"}}}
    with pytest.raises(ConfigError, match=f"composites nest more than {MAX_NESTING} levels deep"):
        build_model(graph({"c": {"block": "chain", "args": {"depth": 3}}}, blocks={"chain": endless}))


def test_a_use_of_itself_without_when_is_still_a_cycle() -> None:
    unguarded = {**CHAIN, "nodes": {**CHAIN["nodes"], "next": {"block": "chain", "args": {"depth": "depth - 1"}}}}
    with pytest.raises(ConfigError, match="composite blocks use each other in a cycle: chain -> chain"):
        build_model(graph({"c": {"block": "chain", "args": {"depth": 3}}}, blocks={"chain": unguarded}))


@pytest.mark.parametrize("sizes", [[4], [4, 8], [4, 8, 16, 32]])
def test_the_unet_decoder_mirrors_enc_sizes(sizes: list[int]) -> None:
    model = create_model("unet", [f"params.enc_sizes={sizes}", "n_classes=3", "input_size=[16,16]"])
    assert model(torch.zeros(2, 1, 16, 16)).shape == (2, 3, 16, 16)
    ups = [m.out_channels for m in model.modules() if isinstance(m, nn.ConvTranspose2d)]
    assert sorted(ups) == sorted(sizes[:-1])  # one upsampling per level below the first, to that level's width
    skips = [m for name, m in model.named_modules() if name.endswith(".skip")]
    assert len(skips) == len(sizes) - 1


def test_len_of_a_list_parameter() -> None:
    model = build_model(graph({"c": {"block": "nn.Conv2d", "args": {"out_channels": "len(widths) * 2",
                                                                     "kernel_size": 1}}},
                              params={"widths": [1, 2, 3]}), seed=0)
    assert model.nodes.c.out_channels == 6
