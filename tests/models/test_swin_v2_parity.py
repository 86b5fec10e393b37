"""conf/blocks/swin_v2.yaml's swin_block_v2 pinned to torchvision's SwinTransformerBlockV2 (issue 49).

Written from ops with the math of issue 49 (normalize, clamp, exp; log-spaced coordinates in a formula):
torchvision's weights (randomized) are copied in by name, and eval, train (same seed) and the gradients of
every weight agree within 1e-6, shifted and unshifted, on a map that needs padding. torchvision is found as
tests/models/test_torchvision_parity.py finds it; without it these tests skip.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from modelforge import build_model
from tests.helpers.parity import import_torchvision_models
from tests.helpers.shipped_blocks import shipped_blocks

import_torchvision_models()
from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformerBlockV2  # noqa: E402

TOLERANCE = 1e-6
CHANNELS, HEADS, WINDOW = 32, 4, 4
# torchvision's name -> ours, within the block (the qkv bias is a parameter of its own here)
PAIRS = {"norm1.weight": "norm1.weight", "norm1.bias": "norm1.bias", "norm2.weight": "norm2.weight",
         "norm2.bias": "norm2.bias", "attn.qkv.weight": "attn.qkv.weight", "attn.qkv.bias": "attn.qkv_bias.weight",
         "attn.proj.weight": "attn.proj.weight", "attn.proj.bias": "attn.proj.bias",
         "attn.logit_scale": "attn.logit_scale.weight", "attn.cpb_mlp.0.weight": "attn.cpb_fc1.weight",
         "attn.cpb_mlp.0.bias": "attn.cpb_fc1.bias", "attn.cpb_mlp.2.weight": "attn.cpb_fc2.weight",
         "mlp.0.weight": "fc1.weight", "mlp.0.bias": "fc1.bias", "mlp.3.weight": "fc2.weight", "mlp.3.bias": "fc2.bias"}


@functools.cache
def blocks() -> dict[str, Any]:
    return shipped_blocks("swin_v2")


def swin_v2_pair(side: tuple[int, int], shifted: bool, **options: Any) -> tuple[nn.Module, nn.Module]:
    """(torchvision's block with random weights, ours with them) on [B, H, W, CHANNELS] maps."""
    torch.manual_seed(0)
    reference = SwinTransformerBlockV2(CHANNELS, HEADS, [WINDOW, WINDOW], [WINDOW // 2 if shifted else 0] * 2,
                                       dropout=options.get("dropout", 0.0),
                                       attention_dropout=options.get("attention_dropout", 0.0),
                                       stochastic_depth_prob=options.get("drop_path", 0.0))
    cfg = {"name": "graph", "in_channels": side[0], "input_size": [side[1], CHANNELS], "blocks": blocks(),
           "nodes": {"b": {"block": "swin_block_v2",
                           "args": {"heads": HEADS, "window": WINDOW, "shifted": shifted, **options}}}}
    ours = build_model(cfg, seed=0).nodes.b
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.normal_(0.0, 0.5)  # no part left at a constant (LayerNorm's ones, zero biases, the scale)
        reference.attn.logit_scale.uniform_(1.0, 5.0)  # some above the clamp at log(100)
        theirs = dict(reference.named_parameters())
        mine = dict(ours.named_parameters())
        assert len(theirs) == len(mine) == len(PAIRS)
        for their_name, my_name in PAIRS.items():
            mine[my_name].copy_(theirs[their_name])
    return reference, ours


CASES = [((10, 13), True), ((10, 13), False), ((8, 8), True), ((3, 13), True)]  # padded; whole windows; one row


@pytest.mark.parametrize(("side", "shifted"), CASES)
def test_swin_block_v2_equals_torchvisions_in_eval(side: tuple[int, int], shifted: bool,
                                                  record_property: Callable[[str, Any], None]) -> None:
    reference, ours = swin_v2_pair(side, shifted)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    x = torch.randn(3, *side, CHANNELS)
    with torch.no_grad():
        expected, got = reference.eval()(x), ours.eval()(x)
    assert got.shape == expected.shape == x.shape
    diff = (got - expected).abs().max().item()
    record_property("summary", f"swin_block_v2 {side} shifted={shifted}: max |ours - torchvision| {diff:.2e} "
                               f"(outputs up to {expected.abs().max().item():.1f})")
    assert diff <= TOLERANCE


def test_the_position_coordinates_are_torchvisions_to_the_last_bit() -> None:
    reference, ours = swin_v2_pair((8, 8), False)
    expected = reference.attn.relative_coords_table.reshape(-1, 2)
    got = ours.attn.coords.tensor
    assert got.dtype == expected.dtype == torch.float32
    assert (got - expected).abs().max().item() <= 1e-7 and got.abs().max().item() > 0.5


def test_swin_block_v2_trains_and_backpropagates_as_torchvisions() -> None:
    """From one seed, train mode (dropout, attention dropout, stochastic depth) gives the same output, and the
    gradients of every weight agree."""
    options = {"dropout": 0.1, "attention_dropout": 0.2, "drop_path": 0.3}
    reference, ours = swin_v2_pair((10, 13), True, **options)
    x = torch.randn(4, 10, 13, CHANNELS)
    torch.manual_seed(1)
    expected = reference.train()(x)
    torch.manual_seed(1)
    got = ours.train()(x)
    assert (got - expected).abs().max().item() <= TOLERANCE
    weights = torch.randn_like(x)
    (expected * weights).sum().backward()
    (got * weights).sum().backward()
    theirs, mine = dict(reference.named_parameters()), dict(ours.named_parameters())
    for their_name, my_name in PAIRS.items():
        g_theirs, g_mine = theirs[their_name].grad, mine[my_name].grad
        if their_name == "attn.qkv.bias":  # torchvision zeroes the key's bias in forward: no gradient reaches it
            g_theirs = g_theirs.clone()
        scale = max(1.0, g_theirs.abs().max().item())
        assert (g_mine - g_theirs).abs().max().item() <= TOLERANCE * scale, their_name


def test_patch_merging_v2_equals_torchvisions() -> None:
    torch.manual_seed(0)
    reference = PatchMergingV2(CHANNELS)
    cfg = {"name": "graph", "in_channels": 7, "input_size": [9, CHANNELS], "blocks": blocks(),
           "nodes": {"m": {"block": "patch_merging_v2"}}}
    ours = build_model(cfg, seed=0).nodes.m
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.normal_(0.0, 0.5)
        ours.load_state_dict(reference.state_dict())
    x = torch.randn(2, 7, 9, CHANNELS)
    with torch.no_grad():
        assert (ours.eval()(x) - reference.eval()(x)).abs().max().item() <= TOLERANCE
