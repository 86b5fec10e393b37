"""Comparing the zoo with its references (torchvision, hand-written modules): torchvision found in the environment
or beside it, its weights paired with ours by first use, weights redrawn so that no part is a constant.

torchvision is optional: :func:`torchvision_models` skips the calling test module when it is absent."""

from __future__ import annotations

import copy
import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

TORCHVISION_BESIDE = Path(sys.prefix) / "torchvision-tests"  # pip install --no-deps --target THERE torchvision==0.28.0


def import_torchvision_models() -> types.ModuleType:
    """``torchvision.models``: from the environment, or else from ``TORCHVISION_BESIDE``.

    The torchvision wheel on PyPI links CUDA builds of torch's libraries. Installed beside a CPU-only torch
    it breaks ``import pytorch_lightning`` (torchmetrics imports torchvision whenever it is installed, and
    torchvision's import stops at ``_meta_registrations``: ``operator torchvision::nms does not exist``).
    There it lives in a folder of its own beside the environment, which only this test puts on ``sys.path``,
    and the one module that registers meta kernels for its C++ operators is replaced by an empty one: the
    model definitions are plain Python and use none of them. Where the extension loads (a CUDA torch,
    torchvision's CPU wheel) nothing is replaced.
    """
    if importlib.util.find_spec("torchvision") is None and TORCHVISION_BESIDE.is_dir():
        sys.path.append(str(TORCHVISION_BESIDE))
    try:
        import torchvision.models as models
    except ImportError:
        pytest.skip(f"torchvision is not installed: pip install --no-deps --target {TORCHVISION_BESIDE} "
                    "torchvision==0.28.0 (README, The model zoo)", allow_module_level=True)
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision.models as models
    return models


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def torchvision_models() -> types.ModuleType:
    """``torchvision.models``, or the calling test module skipped (torchvision is optional)."""
    return import_torchvision_models()


@torch.no_grad()
def randomize_norms(model: nn.Module, input_shape: tuple[int, ...]) -> None:
    """Give every BatchNorm/LayerNorm random affine weights, and BatchNorm random running stats.

    The running stats are measured on a random batch (train mode, cumulative average), so that each
    BatchNorm roughly normalizes its input as a trained one would, then perturbed: drawn blindly,
    they let a deep net's activations die out or blow up, and the output stops depending on the input.
    """
    norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm))]
    for module in norms:
        if module.weight is not None:
            module.weight.uniform_(0.5, 1.5)
        if module.bias is not None:
            module.bias.normal_(0.0, 0.2)
    batch_norms = [m for m in norms if isinstance(m, nn.BatchNorm2d)]
    if batch_norms:
        for bn in batch_norms:
            bn.reset_running_stats()
            bn.momentum = None
        model.train()
        model(torch.randn(4, *input_shape[1:]))
        for bn in batch_norms:
            bn.momentum = 0.1
            bn.running_mean.add_(torch.randn_like(bn.running_mean) * 0.1)
            bn.running_var.mul_(torch.empty_like(bn.running_var).uniform_(0.8, 1.25))



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


def parameter_groups(model: nn.Module) -> dict[str, Tensor]:
    """Every parameter pooled by what it is: a layer kind's weights or biases (``Conv2d.bias``), or ``table``, the
    relative position bias tables (torchvision's attribute, the language's ``parameter`` node)."""
    groups: dict[str, list[Tensor]] = {}
    for module in model.modules():
        for name, parameter in module.named_parameters(recurse=False):
            table = "table" in name or type(module).__name__ == "LearnedTensor"
            groups.setdefault("table" if table else f"{type(module).__name__}.{name}", []).append(
                parameter.detach().flatten())
    return {kind: torch.cat(tensors) for kind, tensors in groups.items()}


def assert_drawn_alike(ours: list[nn.Module], theirs: list[nn.Module]) -> dict[str, Tensor]:
    """Our models' parameters, group by group (pooled over the models: several seeds), drawn as the references'
    are: the same groups and sizes; a constant group equal; a random one of the same mean and spread (within ten
    standard errors) and the same largest size within 25%. Returns our groups."""
    pooled = [{k: torch.cat([parameter_groups(m)[k] for m in models]) for k in parameter_groups(models[0])}
              for models in (ours, theirs)]
    mine, reference = pooled
    assert set(mine) == set(reference)
    for kind, expected in reference.items():
        got = mine[kind]
        assert got.numel() == expected.numel(), kind
        if expected.std() == 0:  # zeros, ones: the same constant
            assert torch.equal(got, expected), kind
            continue
        error = 10 * expected.std().item() / got.numel() ** 0.5  # a difference of two estimates: five errors each
        assert abs(got.mean().item() - expected.mean().item()) < error, kind
        assert abs(got.std().item() - expected.std().item()) < error, kind
        assert 0.8 < got.abs().max().item() / expected.abs().max().item() < 1.25, kind
    return mine
