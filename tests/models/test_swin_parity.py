"""conf/blocks/swin.yaml's swin_block pinned to torchvision's SwinTransformerBlock (issue 39).

The block is written from ops alone (pad to whole windows, roll, window partition by reshape and permute,
q scaled first, a relative position bias looked up by a constant index, the shifted windows' mask built
from a constant of region ids). torchvision's weights (randomized) are copied in by name; the outputs must
agree within 1e-6, shifted and unshifted, on non-square maps, one that needs padding and one whose padded
height a single window covers (torchvision shifts along the width only). torchvision is found as
tests/models/test_torchvision_parity.py finds it; without it these tests skip.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from modelforge import build_model
from tests.helpers.shipped_blocks import shipped_blocks
from tests.helpers.parity import assert_drawn_alike, import_torchvision_models, torchvision_models
from tests.helpers.swin import PAIRS, swin_t_pair

torchvision_models()
from torchvision.models.swin_transformer import SwinTransformerBlock  # noqa: E402  (after the import fix)

TOLERANCE = 1e-6
CHANNELS, HEADS, WINDOW = 32, 4, 7
# torchvision's name -> ours, within the block


@functools.cache
def swin_blocks() -> dict[str, Any]:
    return shipped_blocks("swin")


def swin_block(side: tuple[int, int], **args: Any) -> nn.Module:
    """A model of one swin_block node on [B, H, W, CHANNELS] maps, and that node."""
    cfg = {"name": "graph", "in_channels": side[0], "input_size": [side[1], CHANNELS], "blocks": swin_blocks(),
           "nodes": {"b": {"block": "swin_block", "args": args}}}
    return build_model(cfg, seed=0).nodes.b


def swin_pair(side: tuple[int, int], shifted: bool, **options: Any) -> tuple[nn.Module, nn.Module]:
    """(torchvision's block with random weights, ours with them) on [B, H, W, CHANNELS] maps."""
    torch.manual_seed(0)
    reference = SwinTransformerBlock(CHANNELS, HEADS, [WINDOW, WINDOW], [WINDOW // 2 if shifted else 0] * 2,
                                     dropout=options.get("dropout", 0.0),
                                     attention_dropout=options.get("attention_dropout", 0.0),
                                     stochastic_depth_prob=options.get("drop_path", 0.0))
    ours = swin_block(side, heads=HEADS, window=WINDOW, shifted=shifted, **options)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.normal_(0.0, 0.5)  # no part left at a constant (LayerNorm's ones, zero biases)
        for theirs, mine in PAIRS.items():
            for kind in ("weight", "bias"):
                getattr(ours.get_submodule(mine), kind).copy_(getattr(reference.get_submodule(theirs), kind))
        ours.attn.table.weight.copy_(reference.attn.relative_position_bias_table)
    return reference, ours


CASES = [  # (H, W), shifted: non-square; padded to 14 x 21; a padded height of one window (shift along W only)
    ((14, 21), True), ((14, 21), False), ((13, 17), True), ((13, 17), False), ((5, 17), True)]


@pytest.mark.parametrize(("side", "shifted"), CASES)
def test_swin_block_equals_torchvisions(side: tuple[int, int], shifted: bool,
                                        record_property: Callable[[str, Any], None]) -> None:
    reference, ours = swin_pair(side, shifted)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters()) == 13_380
    x = torch.randn(3, *side, CHANNELS)
    with torch.no_grad():
        expected, got = reference.eval()(x), ours.eval()(x)
    assert got.shape == expected.shape == x.shape
    diff = (got - expected).abs().max().item()
    record_property("summary", f"swin_block {side} shifted={shifted}: max |ours - torchvision| {diff:.2e} "
                               f"(outputs up to {expected.abs().max().item():.1f})")
    assert diff <= TOLERANCE


def test_the_shift_changes_the_output_and_the_mask_is_torchvisions() -> None:
    """Shifted and unshifted blocks differ (the roll and the mask are not no-ops), and the mask's nodes
    exist only where a shift is."""
    _, shifted = swin_pair((14, 21), True)
    _, plain = swin_pair((14, 21), False)
    plain.load_state_dict(shifted.state_dict())
    x = torch.randn(2, 14, 21, CHANNELS)
    with torch.no_grad():
        assert (shifted.eval()(x) - plain.eval()(x)).abs().max() > 1e-2
    assert {"shift", "mask", "unshift"} <= set(shifted.attn) and not {"shift", "mask", "unshift"} & set(plain.attn)
    region = shifted.attn.region.tensor
    assert region.shape == (6, 49) and region.dtype == torch.float32
    assert shifted.attn.offsets.tensor.dtype == torch.int64
    assert "attn.offsets.tensor" not in shifted.state_dict()  # rebuilt from the config, not saved


def test_train_mode_draws_the_masks_torchvision_draws() -> None:
    """Attention dropout, dropout and stochastic depth run in torchvision's order on tensors of its sizes:
    from one seed the train-mode outputs agree."""
    options = {"dropout": 0.1, "attention_dropout": 0.2, "drop_path": 0.3}
    reference, ours = swin_pair((13, 17), True, **options)
    x = torch.randn(4, 13, 17, CHANNELS)
    with torch.no_grad():
        torch.manual_seed(1)
        expected = reference.train()(x)
        torch.manual_seed(1)
        got = ours.train()(x)
    assert (got - expected).abs().max().item() <= TOLERANCE


def test_the_block_runs_on_meta_and_fake_tensors() -> None:
    """Shapes without arithmetic: on the meta device and under FakeTensorMode (how a graph may be built)."""
    _, ours = swin_pair((13, 17), True)
    meta = ours.to("meta").eval()
    assert meta(torch.zeros(2, 13, 17, CHANNELS, device="meta")).shape == (2, 13, 17, CHANNELS)
    _, ours = swin_pair((13, 17), True)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        out = ours.eval()(mode.from_tensor(torch.zeros(2, 13, 17, CHANNELS)))
    assert out.shape == (2, 13, 17, CHANNELS)


# --------------------------------------------------------------------------------------------
# conf/model/swin_t.yaml: torchvision's swin_t, stage by stage

def check_swin_t(side: int, dim: int, record_property: Callable[[str, Any], None]) -> None:
    reference, ours = swin_t_pair(side, dim)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    x = torch.randn(2, 3, side, side)
    with torch.no_grad():
        expected, got = reference.eval()(x), ours.eval()(x)
    diff = (got - expected).abs().max().item()
    record_property("summary", f"swin_t (embed_dim {dim}) at {side}x{side}: max |ours - torchvision| {diff:.2e} "
                               f"(outputs up to {expected.abs().max().item():.2f})")
    assert got.shape == expected.shape == (2, 1000) and diff <= 1e-5 * max(1.0, expected.abs().max().item())
    probabilities = [m.p for m in ours.modules() if type(m).__name__ == "StochasticDepth" and m.p]
    theirs = [m.p for m in reference.modules() if type(m).__name__ == "StochasticDepth" and m.p]
    assert probabilities[::2] == theirs  # ours: one module per residual branch, torchvision's serves both


def test_swin_t_narrow_equals_torchvisions_at_a_size_that_pads(record_property: Callable[[str, Any], None]) -> None:
    """swin_t's file at a quarter of its width (embed_dim 24) and 3x72x72 (stages of 18, 9, 5 and 3: shifted,
    padded, one window): every part of the zoo model's path, quickly."""
    check_swin_t(72, 24, record_property)


@pytest.mark.slow
def test_swin_t_equals_torchvisions(record_property: Callable[[str, Any], None]) -> None:
    """swin_t itself: 28,288,354 parameters at 3x224x224 and 1000 classes."""
    check_swin_t(224, 96, record_property)
    assert sum(p.numel() for p in swin_t_pair(224, 96)[1].parameters()) == 28_288_354


@pytest.mark.slow  # 28M draws of two full swin_t (9 s): the tails need them; the cut itself: tests/layers
def test_swin_t_initialises_as_torchvisions() -> None:
    """Issue 49: the linear weights and the position bias tables are N(0, 0.02) cut at +-2 absolute (std 0.020, a
    max near 5.6 std over 28M draws), the linear biases zero, the norms torch's: in distribution torchvision's."""
    from modelforge import create_model

    torch.manual_seed(0)
    reference = import_torchvision_models().swin_t()
    ours = create_model("swin_t", ["in_channels=3", "n_classes=1000"], seed=0)

    def pooled(model: nn.Module, kind: str) -> torch.Tensor:
        if kind == "table":
            return torch.cat([p.flatten() for n, p in model.named_parameters() if "table" in n])
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        return torch.cat([getattr(m, kind).flatten() for m in linears if getattr(m, kind) is not None])

    for kind in ("weight", "table"):
        theirs, mine = pooled(reference, kind).detach(), pooled(ours, kind).detach()
        assert theirs.numel() == mine.numel()
        error = 5 * 0.02 / mine.numel() ** 0.5  # five standard errors of a mean of so many draws
        assert abs(mine.std().item() - 0.02) < error and abs(theirs.std().item() - 0.02) < error, kind
        assert abs(mine.mean().item()) < error and abs(theirs.mean().item()) < error, kind
        if kind == "weight":  # the tails of 28M draws: past 4.5 std, as torchvision's reach (a 2-std cut stops at 0.04)
            assert mine.abs().max().item() > 0.09 and theirs.abs().max().item() > 0.09
            mine_sorted, theirs_sorted = mine.sort().values, theirs.sort().values
            for q in (0.001, 0.01, 0.5, 0.99, 0.999):  # quantiles of the sorted draws (quantile() takes 16M at most)
                at = int(q * (mine.numel() - 1))
                assert abs(mine_sorted[at].item() - theirs_sorted[at].item()) < 5e-4, q
    assert torch.count_nonzero(pooled(ours, "bias")) == torch.count_nonzero(pooled(reference, "bias")) == 0


def test_swin_t_initialises_as_torchvisions_in_every_group() -> None:
    """Issue 49: each group of parameters (the patch convolution's weight and bias, the linear weights and biases,
    the LayerNorms, the position bias tables) drawn as torchvision's constructor draws it, over three seeds at a
    quarter of the width: the same mean, spread and bound. The patch convolution's bias keeps torch's U(+-1/sqrt(48))
    (conv_bias: default), as torchvision's does, where the swin_t file zeroed it."""
    from torchvision.models.swin_transformer import SwinTransformer

    from modelforge import create_model

    references, models = [], []
    for seed in range(3):
        torch.manual_seed(seed)
        references.append(SwinTransformer([4, 4], 24, [2, 2, 6, 2], [3, 6, 12, 24], [7, 7], stochastic_depth_prob=0.2))
        models.append(create_model("swin_t", ["in_channels=3", "n_classes=1000", "params.dim=24"], seed=seed))
    ours = assert_drawn_alike(models, references)
    assert set(ours) == {"Conv2d.weight", "Conv2d.bias", "Linear.weight", "Linear.bias", "LayerNorm.weight",
                         "LayerNorm.bias", "table"}
    bound = 1 / 48 ** 0.5  # torch's conv bias: U(+-1/sqrt(fan_in)), fan_in 3 * 4 * 4
    assert 0.9 * bound < ours["Conv2d.bias"].abs().max().item() <= bound
