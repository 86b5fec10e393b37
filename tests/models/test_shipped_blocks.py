"""The composites of conf/blocks/ written from the ops (mobile, convnext, attention) compute what torch computes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from modelforge import build_model
from tests.helpers.shipped_blocks import shipped_blocks


def one_block(block: str, args: dict[str, Any], files: tuple[str, ...], shape: tuple[int, ...], **extra: Any) -> nn.Module:
    """A model of one composite node (its output is a feature map, so no class count applies)."""
    cfg = {"name": "graph", "in_channels": shape[0], "input_size": list(shape[1:]),
           "nodes": {"b": {"block": block, "args": args}}, "blocks": shipped_blocks(*files), **extra}
    return build_model(cfg, seed=0).eval()


def test_squeeze_excite_is_a_gate_on_the_channels() -> None:
    model = one_block("squeeze_excite", {"channels": 4}, ("mobile",), (8, 5, 5))
    se = model.nodes.b
    x = torch.randn(2, 8, 5, 5)
    gate = torch.sigmoid(se.expand(F.relu(se.reduce(x.mean((2, 3), keepdim=True)))))
    torch.testing.assert_close(model(x), x * gate)
    assert (se.reduce.out_channels, se.expand.out_channels) == (4, 8)


@pytest.mark.parametrize(("c_in", "c_out", "stride", "residual"), [(16, 16, 1, True), (16, 24, 2, False)])
def test_mbconv_has_efficientnets_parts_and_a_residual_only_when_shapes_match(
        c_in: int, c_out: int, stride: int, residual: bool) -> None:
    model = one_block("mbconv", {"out_channels": c_out, "stride": stride}, ("mobile",), (c_in, 8, 8))
    mb, hidden, squeeze = model.nodes.b, c_in * 6, c_in // 4
    assert mb.dw.conv.groups == hidden and mb.se.reduce.out_channels == squeeze
    expected = (c_in * hidden + 2 * hidden + hidden * 9 + 2 * hidden  # expand, BN, depthwise 3x3, BN
                + hidden * squeeze + squeeze + squeeze * hidden + hidden  # squeeze-and-excitation
                + hidden * c_out + 2 * c_out)  # project, BN
    assert sum(p.numel() for p in model.parameters()) == expected
    assert ("add" in mb) is residual
    assert model(torch.randn(2, c_in, 8, 8)).shape == (2, c_out, 8 // stride, 8 // stride)
    assert "expand" not in one_block("mbconv", {"out_channels": 8, "expansion": 1}, ("mobile",), (8, 4, 4)).nodes.b


def test_convnext_block_is_torchvisions_cnblock_computation() -> None:
    model = one_block("convnext_block", {"layer_scale": 0.5}, ("convnext",), (8, 6, 6))
    b = model.nodes.b
    x = torch.randn(2, 8, 6, 6)
    y = F.conv2d(x, b.dw.weight, b.dw.bias, padding=3, groups=8).permute(0, 2, 3, 1)
    y = F.linear(F.gelu(F.linear(F.layer_norm(y, (8,), b.norm.weight, b.norm.bias, 1e-6), b.fc1.weight, b.fc1.bias)),
                 b.fc2.weight, b.fc2.bias).permute(0, 3, 1, 2)
    assert b.gamma.weight.shape == (8, 1, 1) and torch.all(b.gamma.weight == 0.5)
    torch.testing.assert_close(model(x), x + b.gamma.weight * y)


def test_channels_layer_norm_normalizes_each_pixels_channels() -> None:
    model = one_block("channels_layer_norm", {}, ("convnext",), (6, 3, 3))
    x = torch.randn(2, 6, 3, 3)
    torch.testing.assert_close(model(x), F.layer_norm(x.permute(0, 2, 3, 1), (6,), eps=1e-6).permute(0, 3, 1, 2))


def test_multihead_attention_from_parts_equals_nn_multiheadattention() -> None:
    model = _attention_model()
    parts = model.nodes.b
    reference = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        reference.in_proj_weight.copy_(torch.cat([parts.q.weight, parts.k.weight, parts.v.weight]))
        reference.in_proj_bias.copy_(torch.cat([parts.q.bias, parts.k.bias, parts.v.bias]))
        reference.out_proj.weight.copy_(parts.out.weight)
        reference.out_proj.bias.copy_(parts.out.bias)
    x = torch.randn(3, 7, 16)
    expected = reference(x, x, x, need_weights=False)[0]
    torch.testing.assert_close(model.nodes.b(x), expected, atol=1e-5, rtol=1e-5)


def _attention_model() -> nn.Module:
    """Tokens [B, 7, 16] from a [1, 7, 16] image: the attention block reads them."""
    cfg = {"name": "graph", "in_channels": 1, "input_size": [7, 16], "blocks": shipped_blocks("attention"),
           "nodes": {"tokens": {"block": "flatten", "args": {"start_dim": 1, "end_dim": 2}},
                     "b": {"block": "multihead_attention", "args": {"heads": 4}}}}
    return build_model(cfg, seed=0).eval()


def test_a_small_vit_of_transformer_layers_trains_a_step() -> None:
    cfg = {"name": "graph", "in_channels": 1, "input_size": [8, 8], "blocks": shipped_blocks("attention"),
           "nodes": {"patches": {"block": "nn.Conv2d", "args": {"out_channels": 16, "kernel_size": 4, "stride": 4}},
                     "tokens": {"block": "flatten", "args": {"start_dim": 2}},
                     "seq": {"block": "transpose"},
                     "layers": {"block": "transformer_layer", "args": {"heads": 2}, "repeat": 2},
                     "pool": {"block": "mean", "args": {"dim": 1}},
                     "head": {"block": "nn.Linear", "args": {"out_features": "n_classes"}}}}
    model = build_model(cfg, seed=0)
    loss = F.cross_entropy(model(torch.randn(4, 1, 8, 8)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert model.nodes.layers[1].attn.q.weight.grad is not None
