"""The torchvision models of conf/model/ pinned to torchvision itself (issue 34).

For each model, ``torchvision.models.<name>(weights=None)`` at its own definition (3x224x224,
1000 classes) and ``create_model(<name>, ...)`` at the same shape: the same parameter count,
torchvision's weights (randomized, so that no part is a constant) copied into ours, the same output
in eval mode, and in train mode the same stochastic modules (dropout, stochastic depth) run with the
same probabilities in the same order, and give the same output for the same seed.

Weights are paired by the order a forward first reads them (``first_use_order``), not by name or
registration order: torchvision registers ConvNeXt's layer scale and ViT's class token before the
layers that run first. torchvision is a test extra (pyproject's ``dev``); without it these tests skip.
"""

from __future__ import annotations

import copy
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from modelforge import create_model
from tests.models.test_zoo import n_params, randomize_norms

IMAGENET = ["in_channels=3", "n_classes=1000", "input_size=[224,224]"]
TOLERANCE = 1e-5  # of the output's largest magnitude


def import_torchvision_models() -> types.ModuleType:
    """``torchvision.models``, also where torchvision's compiled extension cannot load.

    The torchvision wheel on PyPI links CUDA builds of torch's libraries; beside a CPU-only torch its
    import stops at ``torchvision._meta_registrations`` (``operator torchvision::nms does not exist``),
    which registers meta kernels for its C++ operators. The model definitions are plain Python and use
    none of those operators, so that one module is replaced by an empty one and the import retried.
    Where the extension loads (a CUDA torch, or torchvision's CPU wheel) nothing is replaced.
    """
    try:
        import torchvision.models as models
    except ImportError:
        pytest.skip("torchvision is not installed (it is a test extra: pip install '.[dev]')", allow_module_level=True)
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision.models as models
    return models


tv_models = import_torchvision_models()
from torchvision.ops import StochasticDepth as TorchvisionStochasticDepth  # noqa: E402  (after the import fix)


# --------------------------------------------------------------------------------------------
# pairing torchvision's weights with ours


class _FirstUse(TorchFunctionMode):
    """Records which of a model's parameters and buffers each torch function call reads, in order."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        state = model.state_dict(keep_vars=True)
        self.names = {id(tensor): key for key, tensor in state.items()}
        self.order: dict[str, None] = {}  # an ordered set

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        for leaf in tree_leaves((args, kwargs or {})):
            key = self.names.get(id(leaf))
            if key is not None:
                self.order.setdefault(key, None)
        return func(*args, **(kwargs or {}))


def first_use_order(model: nn.Module, x: Tensor) -> list[str]:
    """The model's state_dict keys in the order an eval forward first reads them, then the entries no
    forward reads (BatchNorm's ``num_batches_tracked``) in state_dict order. The forward runs on a
    copy on the meta device: shapes only, no arithmetic."""
    meta = copy.deepcopy(model).to("meta").eval()
    recorder = _FirstUse(meta)
    with torch.no_grad(), recorder:
        meta(x.to("meta"))
    unread = [key for key in meta.state_dict() if key not in recorder.order]
    return [*recorder.order, *unread]


def copy_torchvision_weights(reference: nn.Module, ours: nn.Module, x: Tensor) -> None:
    """Load the reference's state_dict into ours, pairing entries by ``first_use_order``; every pair
    must agree in shape and dtype (the error names both keys)."""
    ref_keys, our_keys = first_use_order(reference, x), first_use_order(ours, x)
    ref_state, our_state = reference.state_dict(), ours.state_dict()
    assert len(ref_keys) == len(our_keys), (
        f"state_dict lengths differ: torchvision {len(ref_keys)}, ours {len(our_keys)}; torchvision only: "
        f"{ref_keys[len(our_keys):][:5]}, ours only: {our_keys[len(ref_keys):][:5]}")
    loaded = {}
    for i, (ref_key, our_key) in enumerate(zip(ref_keys, our_keys)):
        ref_value, our_value = ref_state[ref_key], our_state[our_key]
        assert (ref_value.shape, ref_value.dtype) == (our_value.shape, our_value.dtype), (
            f"entry {i} in the order of first use: torchvision {ref_key} {tuple(ref_value.shape)} {ref_value.dtype}"
            f" != ours {our_key} {tuple(our_value.shape)} {our_value.dtype}")
        loaded[our_key] = ref_value.clone()
    ours.load_state_dict(loaded, strict=True)


@torch.no_grad()
def randomize(model: nn.Module, x: Tensor) -> None:
    """Redraw every parameter that holds one value throughout (biases at zero, ConvNeXt's layer scale at
    1e-6, ViT's zeroed head and class token), then the norms (``randomize_norms``): a part left at a
    constant could be wired wrongly, or not at all, and still give the same output."""
    norms = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)
    normed = {id(p) for m in model.modules() if isinstance(m, norms) for p in m.parameters(recurse=False)}
    for parameter in model.parameters():
        if id(parameter) not in normed and parameter.numel() > 1 and bool((parameter == parameter.flatten()[0]).all()):
            parameter.normal_(0.0, 0.1)
    randomize_norms(model, tuple(x.shape))


# --------------------------------------------------------------------------------------------
# train mode: which stochastic modules run, with which probability

STOCHASTIC = (nn.Dropout, TorchvisionStochasticDepth)


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
    if hasattr(module, "mode") and isinstance(getattr(module, "p", None), float) and module.__class__.__name__ == "StochasticDepth":
        return (f"stochastic_depth/{module.mode}", float(module.p))
    return None


# --------------------------------------------------------------------------------------------
# the parity check


def check_parity(name: str, params: int, capsys: pytest.CaptureFixture[str], batch: int = 2) -> None:
    torch.manual_seed(0)
    reference = getattr(tv_models, name)(weights=None)
    ours = create_model(name, IMAGENET)
    assert n_params(reference) == params, f"torchvision's {name} has {n_params(reference):,} parameters"
    assert n_params(ours) == params, f"ours has {n_params(ours):,} parameters, torchvision's {params:,}"
    x = torch.randn(batch, 3, 224, 224)
    randomize(reference, x)
    copy_torchvision_weights(reference, ours, x)

    reference.eval(), ours.eval()
    with torch.no_grad():
        expected, got = reference(x), ours(x)
    assert got.shape == expected.shape == (batch, 1000)
    assert (expected[0] - expected[1]).abs().max() > 1e-3, "the output does not depend on the input"
    scale = expected.abs().max().item()
    eval_diff = (got - expected).abs().max().item()

    assert stochastic_modules_run(ours, x) == stochastic_modules_run(reference, x)
    reference.train(), ours.train()
    with torch.no_grad():
        torch.manual_seed(1)
        expected_train = reference(x)
        torch.manual_seed(1)
        got_train = ours(x)
    train_diff = (got_train - expected_train).abs().max().item()
    with capsys.disabled():
        print(f"\n{name}: {params:,} parameters; max |ours - torchvision| eval {eval_diff:.2e}, "
              f"train {train_diff:.2e} (output scale {scale:.2f})", end=" ")
    assert eval_diff <= TOLERANCE * max(1.0, scale), f"eval outputs differ by {eval_diff:.3g} (scale {scale:.3g})"
    assert train_diff <= TOLERANCE * max(1.0, expected_train.abs().max().item()), \
        f"train-mode outputs differ by {train_diff:.3g}"


def test_resnet50_equals_torchvision(capsys: pytest.CaptureFixture[str]) -> None:
    check_parity("resnet50", 25_557_032, capsys)
