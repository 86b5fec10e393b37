"""conf/model/maxvit_t.yaml pinned to torchvision's maxvit_t (issue 49): the same parameters, and torchvision's
outputs exactly, in eval and in train mode (the same stochastic depth masks from one seed), once a torchvision
state_dict file (random weights, saved with torch.save) is loaded through init.from, which pairs it by structure
and checks and skips its relative_position_index buffers (constants of the language).

maxvit_t itself at 3x224x224 is slow on 2 cores (`slow`); the default run checks the same file at a small MaxVit
built the same way on both sides: 64x64 (maps of 16, 8, 4 and 2), a 2x2 window, two layers in the first stage (the identity shortcut),
heads of 8 channels. torchvision is found as tests/helpers/parity.py finds it; without it these tests skip.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from modelforge import ConfigError, create_model
from modelforge.train.transfer import apply_transfer
from tests.helpers.parity import assert_drawn_alike, n_params, torchvision_models

torchvision_models()
from torchvision.models.maxvit import MaxVit  # noqa: E402  (after the import fix)

# torchvision's MaxVit arguments and the model file's overrides that build the same network
SMALL = {"stem_channels": 8, "block_channels": [16, 32, 48, 64], "block_layers": [2, 1, 1, 1],
         "partition_size": 2, "head_dim": 8}
SMALL_OVERRIDES = ["params.stem=8", "params.widths=[16,32,48,64]", "params.depths=[2,1,1,1]", "params.window=2",
                   "params.head_dim=8"]
MAXVIT_T = {"stem_channels": 64, "block_channels": [64, 128, 256, 512], "block_layers": [2, 2, 5, 2],
            "partition_size": 7, "head_dim": 32}


def drop_probabilities(model: nn.Module) -> list[float]:
    return [m.p for m in model.modules() if type(m).__name__ == "StochasticDepth" and m.p]


@torch.no_grad()
def redraw(model: nn.Module) -> None:
    """No part left at a constant (zero biases, the norms' unit weights, BatchNorm's fresh statistics), drawn without
    running the model (tests/helpers/parity.py's randomize measures the statistics with a forward: seconds here)."""
    norms = (nn.BatchNorm2d, nn.LayerNorm)
    for module in model.modules():
        if isinstance(module, norms):
            module.weight.uniform_(0.5, 1.5)
            module.bias.normal_(0.0, 0.2)
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.normal_(0.0, 0.2)
            module.running_var.uniform_(0.5, 1.5)
        elif not isinstance(module, norms):
            for parameter in module.parameters(recurse=False):
                parameter.normal_(0.0, 0.1)


def check_maxvit(side: int, arguments: dict[str, Any], overrides: list[str], tmp_path: Path,
                 record_property: Callable[[str, Any], None]) -> int:
    """Build both at ``side`` x ``side``, load torchvision's saved weights into ours by init.from, compare outputs
    in eval and train mode; return the parameter count."""
    torch.manual_seed(0)
    reference = MaxVit(input_size=(side, side), stochastic_depth_prob=0.2, **arguments)
    x = torch.randn(2, 3, side, side)
    redraw(reference)
    torch.save(reference.state_dict(), tmp_path / "maxvit.pth")
    ours = create_model("maxvit_t", ["in_channels=3", "n_classes=1000", f"input_size=[{side},{side}]", *overrides])
    assert n_params(ours) == n_params(reference)

    transfer = apply_transfer({"init": {"from": str(tmp_path / "maxvit.pth"), "strict": True}}, ours)
    total, layers = len(ours.state_dict()), sum(arguments["block_layers"])
    lines = transfer.lines(ours)
    assert lines[0].startswith(f"init.from: loaded {total} of the model's {total} tensors")
    assert transfer.record(ours)["init"]["constants"]["count"] == 2 * layers  # a window and a grid index per layer

    with torch.no_grad():
        expected, got = reference.eval()(x), ours.eval()(x)
        assert (expected[0] - expected[1]).abs().max() > 1e-3  # the output depends on the input
        diff = (got - expected).abs().max().item()
        torch.manual_seed(1)
        expected_train = reference.train()(x)
        torch.manual_seed(1)
        got_train = ours.train()(x)
    record_property("summary", f"maxvit at {side}x{side}, {n_params(ours):,} params: max |ours - torchvision| "
                               f"{diff:.2e} eval, {(got_train - expected_train).abs().max().item():.2e} train")
    assert got.shape == expected.shape == (2, 1000) and diff == 0.0
    assert (expected_train - expected).abs().max() > 1e-3  # stochastic depth dropped some branches
    assert (got_train - expected_train).abs().max().item() == 0.0
    # ours: one StochasticDepth per residual branch, torchvision's PartitionAttentionLayer shares one; the first layer has p 0
    theirs = drop_probabilities(reference)
    assert sorted(set(drop_probabilities(ours))) == sorted(set(theirs)) and len(theirs) == 3 * (layers - 1)
    return n_params(ours)


def test_a_small_maxvit_equals_torchvisions(tmp_path: Path, record_property: Callable[[str, Any], None]) -> None:
    check_maxvit(64, SMALL, SMALL_OVERRIDES, tmp_path, record_property)


@pytest.mark.slow  # 31M parameters at 224x224: about 25 s of CPU
def test_maxvit_t_equals_torchvisions(tmp_path: Path, record_property: Callable[[str, Any], None]) -> None:
    """maxvit_t itself: 30,919,624 parameters at 3x224x224 and 1000 classes, torchvision's published count."""
    assert check_maxvit(224, MAXVIT_T, [], tmp_path, record_property) == 30_919_624


def test_a_small_maxvit_initialises_as_torchvisions() -> None:
    """Each group of parameters (N(0, 0.02) conv and linear weights, zero biases, the norms' ones and zeros, the
    position bias tables cut at +-2) drawn as torchvision's constructor draws it, over three seeds."""
    references, models = [], []
    for seed in range(3):
        torch.manual_seed(seed)
        references.append(MaxVit(input_size=(64, 64), stochastic_depth_prob=0.2, **SMALL))
        models.append(create_model("maxvit_t", ["in_channels=3", "n_classes=1000", "input_size=[64,64]",
                                                *SMALL_OVERRIDES], seed=seed))
    assert {"Conv2d.weight", "Conv2d.bias", "Linear.weight", "BatchNorm2d.weight", "table"} <= set(
        assert_drawn_alike(models, references))


def test_a_size_whose_maps_the_window_does_not_divide_is_refused_at_build() -> None:
    """At 64x64 the first stage's map is 16x16, which 7x7 windows do not divide (torchvision's constructor refuses it
    too): one error naming the node, before any batch."""
    with pytest.raises(ConfigError, match=r"^model.blocks.partition_attention.nodes.split: node 'split' cannot reshape "
                                          r"16384 values per sample to \[64, 2, 7, 2, 7\]: input \[2, 64, 16, 16\] "
                                          r"\[in model.blocks.maxvit_layer.nodes.window_attention\] "
                                          r"\[in model.nodes.stage1\[0\]\]"):
        create_model("maxvit_t", ["in_channels=3", "input_size=[64,64]"])
    with pytest.raises(ValueError, match="is not divisible by partition size 7"):
        MaxVit(input_size=(64, 64), stochastic_depth_prob=0.2, **MAXVIT_T)
