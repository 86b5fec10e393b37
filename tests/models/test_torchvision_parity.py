"""The torchvision models of conf/model/ pinned to torchvision itself (issue 34).

For each model, ``torchvision.models.<name>(weights=None)`` at its own definition (3 channels, 1000
classes) and ``create_model(<name>, ...)`` at the same shape: the same parameter count, torchvision's
weights (randomized, so that no part is a constant) copied into ours, the same output in eval mode
(the largest difference is printed at the end of the run, tests/conftest.py), and in train mode the same stochastic modules (dropout,
stochastic depth) run with the same probabilities in the same order, and give the same output for
the same seed. The MNIST variants (1x28x28, 10 classes) build from the same files.

Weights are paired by the order a forward first reads them (``first_use_order``), not by name or
registration order: torchvision registers ConvNeXt's layer scale and ViT's class token before the
layers that run first. torchvision 0.28 is found as ``tests/helpers/parity.py`` says; without it these tests skip.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from modelforge import create_model
from modelforge.errors import ConfigError
from modelforge.layers import StochasticDepth
from tests.helpers.parity import (
    copy_torchvision_weights,
    first_use_order,
    n_params,
    randomize,
    torchvision_models,
)

TOLERANCE = 1e-5  # of the output's largest magnitude


tv_models = torchvision_models()
from torchvision.ops import StochasticDepth as TorchvisionStochasticDepth  # noqa: E402  (after the import fix)


# --------------------------------------------------------------------------------------------
# train mode: which stochastic modules run, with which probability

def stochastic_modules_run(model: nn.Module, x: Tensor) -> list[tuple[str, float]]:
    """(kind, probability) of each dropout or stochastic-depth module a train-mode forward runs, in order
    (on the meta device). torchvision's EfficientNet holds a StochasticDepth in every block but runs
    only those of the residual blocks: modules that exist and never run are left out."""
    meta = copy.deepcopy(model).to("meta").train()
    seen: list[tuple[str, float]] = []
    handles = [m.register_forward_hook(lambda m, *_: seen.append(_stochastic_kind(m)))
               for m in meta.modules() if _stochastic_kind(m) is not None]
    with torch.no_grad():
        meta(x.to("meta"))
    for handle in handles:
        handle.remove()
    return seen


def _stochastic_kind(module: nn.Module) -> tuple[str, float] | None:
    if isinstance(module, nn.Dropout):
        return ("dropout", float(module.p))
    if isinstance(module, (StochasticDepth, TorchvisionStochasticDepth)):
        return (f"stochastic_depth/{module.mode}", float(module.p))
    return None


class _ScaleFirst(nn.Module):
    """Registers ``scale`` before ``linear`` but reads it after, as ConvNeXt's block does its layer scale."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.linear = nn.Linear(3, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * self.linear(x)


def test_weights_pair_by_first_use_and_a_mismatch_names_both_keys() -> None:
    x = torch.randn(2, 3)
    assert first_use_order(_ScaleFirst(), x) == ["linear.weight", "linear.bias", "scale"]
    assert first_use_order(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)), x) == [
        "0.weight", "0.bias", "1.running_mean", "1.running_var", "1.weight", "1.bias", "1.num_batches_tracked"]
    reference, ours = _ScaleFirst(), nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4, bias=False))
    with pytest.raises(AssertionError, match=r"entry 2 in the order of first use: torchvision scale \(4,\) "
                                             r"torch\.float32 != ours 1\.weight \(4, 4\)"):
        copy_torchvision_weights(reference, ours, x)


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_stochastic_depth_draws_the_masks_torchvision_draws(mode: str) -> None:
    x = torch.randn(64, 3, 2, 2)
    for p in (0.0, 0.3, 1.0):
        torch.manual_seed(7)
        expected = TorchvisionStochasticDepth(p, mode).train()(x)
        torch.manual_seed(7)
        assert torch.equal(StochasticDepth(p, mode).train()(x), expected)


# --------------------------------------------------------------------------------------------
# the parity checks, one model at a time (built once for all its tests)

# name: torchvision's parameter count at 1000 classes, the image side the outputs are compared at, and the
# options both are built with. The conv nets hold the same parameters at any size, and torchvision's forward
# takes any size: 64x64 runs the same modules in a tenth of the time. ViT-B/16 is compared at 64x64 with 3 of
# its 12 encoder blocks (torchvision's VisionTransformer at those options; ours with params.depth=3): the same
# modules, in a tenth of the time of the whole model at 224x224. The whole model's count at 224x224 is
# test_vit_at_224x224_holds_torchvisions_parameter_count's.
VIT_B_16_AT_64 = {"image_size": 64, "patch_size": 16, "num_layers": 3, "num_heads": 12, "hidden_dim": 768,
                  "mlp_dim": 3072}
MODELS: dict[str, tuple[int, int, dict[str, int], list[str]]] = {
    "resnet50": (25_557_032, 64, {}, []),
    "mobilenet_v3_small": (2_542_856, 64, {}, []),
    "efficientnet_b0": (5_288_548, 64, {}, []),
    "convnext_tiny": (28_589_128, 64, {}, []),
    # 86,567,656 less 180 position embeddings of 768 (16 patches, not 196) and 9 blocks of 7,087,872
    "vit_b_16": (86_567_656 - 180 * 768 - 9 * 7_087_872, 64, VIT_B_16_AT_64, ["params.depth=3"]),
}


class Pair:
    """torchvision's model, randomized, and ours with its weights; ``x`` is the batch both are compared on."""

    def __init__(self, name: str) -> None:
        params, side, options, overrides = MODELS[name]
        torch.manual_seed(0)
        self.name, self.params = name, params
        if options:
            from torchvision.models.vision_transformer import VisionTransformer

            self.reference = VisionTransformer(**options)
        else:
            self.reference = getattr(tv_models, name)(weights=None)
        self.ours = create_model(name, ["in_channels=3", "n_classes=1000", f"input_size=[{side},{side}]",
                                        *overrides])
        self.x = torch.randn(2, 3, side, side)
        randomize(self.reference, self.x)
        copy_torchvision_weights(self.reference, self.ours, self.x)


@pytest.fixture(scope="module", params=list(MODELS))
def pair(request: pytest.FixtureRequest) -> Pair:
    return Pair(request.param)




def test_parameter_count_equals_torchvision(pair: Pair) -> None:
    assert n_params(pair.reference) == pair.params, f"torchvision's {pair.name}: {n_params(pair.reference):,}"
    assert n_params(pair.ours) == pair.params


def test_vit_at_224x224_holds_torchvisions_parameter_count() -> None:
    """The count docs/zoo.md gives, at torchvision's own image size (built on the meta device: shapes only)."""
    with torch.device("meta"):
        reference = tv_models.vit_b_16(weights=None)
        ours = create_model("vit_b_16", ["in_channels=3", "n_classes=1000", "input_size=[224,224]"])
    assert n_params(ours) == n_params(reference) == 86_567_656


def test_eval_output_equals_torchvision(pair: Pair, record_property: Callable[[str, Any], None]) -> None:
    pair.reference.eval(), pair.ours.eval()
    with torch.no_grad():
        expected, got = pair.reference(pair.x), pair.ours(pair.x)
    assert got.shape == expected.shape == (2, 1000)
    assert (expected[0] - expected[1]).abs().max() > 1e-3, "the output does not depend on the input"
    scale, diff = expected.abs().max().item(), (got - expected).abs().max().item()
    record_property("summary", f"{pair.name} eval: max |ours - torchvision| {diff:.2e} (outputs up to {scale:.2f})")
    assert diff <= TOLERANCE * max(1.0, scale)


def test_train_mode_drops_as_torchvision(pair: Pair, record_property: Callable[[str, Any], None]) -> None:
    """The same dropout and stochastic-depth modules run, in the same order, with the same probabilities;
    from one seed they draw the same masks, so train-mode outputs (BatchNorm on batch statistics) agree."""
    ours, theirs = stochastic_modules_run(pair.ours, pair.x), stochastic_modules_run(pair.reference, pair.x)
    assert [kind for kind, _ in ours] == [kind for kind, _ in theirs]
    assert [p for _, p in ours] == pytest.approx([p for _, p in theirs], rel=1e-12)  # convnext: 0.1/17*k vs 0.1*k/17
    reference, model = copy.deepcopy(pair.reference).train(), copy.deepcopy(pair.ours).train()
    with torch.no_grad():
        torch.manual_seed(1)
        expected = reference(pair.x)
        torch.manual_seed(1)
        got = model(pair.x)
    diff = (got - expected).abs().max().item()
    probabilities = sorted({p for _, p in theirs})
    record_property("summary", f"{pair.name} train: {len(theirs)} dropout/stochastic-depth modules run, p "
                   f"{' to '.join(f'{p:.3g}' for p in probabilities[::max(1, len(probabilities) - 1)]) or '-'}; "
                   f"max |ours - torchvision| {diff:.2e}")
    assert diff <= TOLERANCE * max(1.0, expected.abs().max().item())


def test_train_mode_gradients_equal_torchvision(pair: Pair, record_property: Callable[[str, Any], None]) -> None:
    """A train-mode backward from one seed gives every parameter torchvision's gradient (ViT: its attention
    called with need_weights=False, as torchvision calls it: the same kernels)."""
    reference, model = copy.deepcopy(pair.reference).train(), copy.deepcopy(pair.ours).train()
    weights = torch.randn(2, 1000, generator=torch.Generator().manual_seed(2))  # a loss that reads every logit
    for module in (reference, model):
        torch.manual_seed(1)
        (module(pair.x) * weights).sum().backward()
    theirs, ours = dict(reference.named_parameters()), dict(model.named_parameters())
    pairs = [(t, o) for t, o in zip(first_use_order(pair.reference, pair.x), first_use_order(pair.ours, pair.x))
             if t in theirs]
    assert len(pairs) == len(theirs) == len(ours)
    diff = max((theirs[t].grad - ours[o].grad).abs().max().item() for t, o in pairs)
    scale = max(theirs[t].grad.abs().max().item() for t, _ in pairs)
    record_property("summary", f"{pair.name} train gradients: max |ours - torchvision| {diff:.2e} (up to {scale:.2f})")
    assert diff <= 1e-6 * max(1.0, scale)


# --------------------------------------------------------------------------------------------
# the MNIST variants: the same files at 1x28x28 and 10 classes (the data's shape, filled in by a run)

MNIST = ["resnet50", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny", "vit_b_16"]


@pytest.mark.parametrize("name", MNIST)
def test_mnist_variant_takes_grey_28x28_and_gives_10_logits(name: str) -> None:
    with torch.device("meta"):  # shapes only: no weights drawn, no arithmetic
        model = create_model(name).eval()  # the data's shape: 1x28x28, 10 classes
    first_conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert first_conv.in_channels == 1
    with torch.no_grad():
        assert model(torch.randn(2, 1, 28, 28, device="meta")).shape == (2, 10)


@pytest.mark.parametrize(("name", "side", "stem"), [
    ("convnext_tiny", 28, 2), ("convnext_tiny", 32, 4), ("vit_b_16", 28, 4), ("vit_b_16", 63, 4), ("vit_b_16", 64, 16)])
def test_small_images_get_a_smaller_stem(name: str, side: int, stem: int) -> None:
    """ConvNeXt's 4x4 stem and ViT's 16x16 patches leave nothing (ConvNeXt) or one patch (ViT) of a 28x28 image."""
    node = "stem" if name == "convnext_tiny" else "patches"
    model = create_model(name, [f"input_size=[{side},{side + 8}]"] + (["params.depth=1"] if name == "vit_b_16" else []))
    conv = model.get_submodule(f"nodes.{node}")
    assert conv.kernel_size == conv.stride == (stem, stem)
