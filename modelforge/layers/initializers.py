"""Weight initializers, applied to a built model with ``model.apply``.

An initializer factory takes its options and returns a function that fills a
tensor in place, or ``None`` for ``default`` (keep what PyTorch chose).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from modelforge.layers.kwargs import check_arg_types, check_kwargs, split_spec
from modelforge.registry import INITIALIZERS

TensorInit = Callable[[torch.Tensor], Any]

# Which rule of the init config applies to which parameter. ``conv_bias`` and ``linear_bias``, when given, take
# the place of ``bias`` for those layers: torchvision's Swin zeroes its linear biases and keeps torch's for its conv.
INIT_RULES = ("conv", "linear", "bias", "norm", "conv_bias", "linear_bias")
_OWN_BIAS = {"conv_bias": "conv", "linear_bias": "linear"}


@INITIALIZERS.register("default")
def default() -> None:
    """Keep PyTorch's own initialization."""
    return None


@INITIALIZERS.register("kaiming_normal")
def kaiming_normal(mode: str = "fan_out", nonlinearity: str = "relu", a: float = 0.0) -> TensorInit:
    """He normal init (good for ReLU-family networks)."""
    return lambda t: nn.init.kaiming_normal_(t, a=a, mode=mode, nonlinearity=nonlinearity)


@INITIALIZERS.register("kaiming_uniform")
def kaiming_uniform(mode: str = "fan_in", nonlinearity: str = "relu", a: float = 0.0) -> TensorInit:
    """He uniform init."""
    return lambda t: nn.init.kaiming_uniform_(t, a=a, mode=mode, nonlinearity=nonlinearity)


@INITIALIZERS.register("xavier_normal")
def xavier_normal(gain: float = 1.0) -> TensorInit:
    """Glorot normal init (good for tanh/sigmoid networks)."""
    return lambda t: nn.init.xavier_normal_(t, gain=gain)


@INITIALIZERS.register("xavier_uniform")
def xavier_uniform(gain: float = 1.0) -> TensorInit:
    """Glorot uniform init."""
    return lambda t: nn.init.xavier_uniform_(t, gain=gain)


@INITIALIZERS.register("normal")
def normal(mean: float = 0.0, std: float = 0.02) -> TensorInit:
    """Normal(mean, std)."""
    return lambda t: nn.init.normal_(t, mean=mean, std=std)


@INITIALIZERS.register("trunc_normal")
def trunc_normal(std: float = 0.02, mean: float = 0.0, a: float = -2.0, b: float = 2.0) -> TensorInit:
    """Normal(mean, std) truncated to [a, b], absolute values as torch's ``trunc_normal_`` takes them (torchvision's
    Swin, ConvNeXt and ViT cut at its default +-2: with std 0.02, 100 standard deviations)."""
    if min(b - mean, mean - a) >= FAR * std:
        return lambda t: _normal_within(t, mean, std, a, b)
    return lambda t: nn.init.trunc_normal_(t, mean=mean, std=std, a=a, b=b)


FAR = 8.0  # standard deviations: a normal draw lands beyond with a chance of 1e-15


def _normal_within(tensor: torch.Tensor, mean: float, std: float, a: float, b: float) -> torch.Tensor:
    """``trunc_normal_`` where the cut is ``FAR`` standard deviations away or more: torch draws ``normal_`` and
    then scans every element for one outside [a, b] (four passes over each tensor, the most of swin_t's build),
    a redraw that never comes; the same draw, clamped, is the same values in one pass."""
    with torch.no_grad():
        return tensor.normal_(mean, std).clamp_(a, b)


@INITIALIZERS.register("orthogonal")
def orthogonal(gain: float = 1.0) -> TensorInit:
    """(Semi-)orthogonal matrix, reshaped for convolutions."""
    return lambda t: nn.init.orthogonal_(t, gain=gain)


@INITIALIZERS.register("constant")
def constant(val: float = 0.0) -> TensorInit:
    """Every element set to ``val``."""
    return lambda t: nn.init.constant_(t, val)


@INITIALIZERS.register("zeros")
def zeros() -> TensorInit:
    """Every element zero."""
    return nn.init.zeros_


@INITIALIZERS.register("ones")
def ones() -> TensorInit:
    """Every element one."""
    return nn.init.ones_


def make_initializer(spec: Any, path: str) -> TensorInit | None:
    """Build one tensor initializer from ``"name"`` or ``{name: ..., **options}``."""
    name, options = split_spec(spec, path, "initializer")
    factory = INITIALIZERS.get(name, path=path)
    check_kwargs(factory, options, path, f"initializer {name!r}")
    check_arg_types(factory, options, path)
    return factory(**options)


_NORMS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def make_init_fn(init_cfg: Mapping[str, Any], path: str = "model.init") -> Callable[[nn.Module], None]:
    """Turn an init config into a function for ``model.apply``.

    Rules: ``conv`` and ``linear`` fill those layers' weights, ``bias`` their
    biases (``conv_bias``, ``linear_bias``: those of one kind, in its place), ``norm`` the weights (scales) of
    normalization layers.
    """
    return _init_module(_rules(init_cfg, path))


def make_block_init(init_cfg: Mapping[str, Any], path: str = "model.init") -> Callable[[nn.Module], None] | None:
    """:func:`make_init_fn`'s function, or None when every rule keeps PyTorch's init (nothing to apply)."""
    rules = _rules(init_cfg, path)
    return _init_module(rules) if any(rule is not None for rule in rules.values()) else None


def _rules(init_cfg: Mapping[str, Any], path: str) -> dict[str, TensorInit | None]:
    rules = {key: make_initializer(init_cfg.get(key, "default"), f"{path}.{key}") for key in INIT_RULES
             if key not in _OWN_BIAS}
    for key in _OWN_BIAS:  # unset: the bias rule; "default": PyTorch's, whatever the bias rule says
        rules[key] = make_initializer(init_cfg[key], f"{path}.{key}") if key in init_cfg else rules["bias"]
    return rules


def _init_module(rules: Mapping[str, TensorInit | None]) -> Callable[[nn.Module], None]:
    def init_module(module: nn.Module) -> None:
        if isinstance(module, nn.modules.conv._ConvNd):
            weight_rule, bias_rule = rules["conv"], rules["conv_bias"]
        elif isinstance(module, nn.Linear):
            weight_rule, bias_rule = rules["linear"], rules["linear_bias"]
        elif isinstance(module, _NORMS):
            weight_rule = rules["norm"]
            if weight_rule and module.weight is not None:
                weight_rule(module.weight)
            return
        else:
            return
        if weight_rule:
            weight_rule(module.weight)
        if bias_rule and module.bias is not None:
            bias_rule(module.bias)

    return init_module


def initialize(model: nn.Module, init_cfg: Mapping[str, Any], path: str = "model.init") -> nn.Module:
    """Apply the init config to every submodule, in place, without recording gradients."""
    init_fn = make_init_fn(init_cfg, path)
    with torch.no_grad():
        model.apply(init_fn)
    return model
