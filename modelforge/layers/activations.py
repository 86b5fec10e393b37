"""Activations, chosen by key.

The seeds built an ``nn.ModuleDict`` of every activation and indexed it with the
configured key. The registry keeps that key -> module mapping as factories, so
only the chosen activation is ever instantiated and part of the model: a PReLU
that was not chosen leaves no parameters in the state_dict.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from modelforge.layers.kwargs import check_arg_types, check_kwargs, split_spec
from modelforge.registry import ACTIVATIONS

for _name, _factory, _doc in [
    ("relu", nn.ReLU, "max(0, x)"),
    ("lrelu", nn.LeakyReLU, "Leaky ReLU; option negative_slope (default 0.01)"),
    ("prelu", nn.PReLU, "Leaky ReLU with a learned slope; options num_parameters, init"),
    ("gelu", nn.GELU, "Gaussian error linear unit; option approximate ('none' or 'tanh')"),
    ("silu", nn.SiLU, "x * sigmoid(x), a.k.a. swish"),
    ("relu6", nn.ReLU6, "min(max(0, x), 6) (MobileNetV2)"),
    ("hardswish", nn.Hardswish, "x * relu6(x + 3) / 6, a cheap swish (MobileNetV3)"),
    ("hardsigmoid", nn.Hardsigmoid, "relu6(x + 3) / 6, a cheap sigmoid (MobileNetV3's squeeze-and-excitation)"),
    ("elu", nn.ELU, "Exponential linear unit; option alpha"),
    ("selu", nn.SELU, "Scaled ELU, self-normalizing"),
    ("tanh", nn.Tanh, "Hyperbolic tangent"),
    ("sigmoid", nn.Sigmoid, "Logistic sigmoid"),
    ("identity", nn.Identity, "No activation (passes the input through)"),
]:
    ACTIVATIONS.add(_name, _factory, description=_doc)


def make_activation(spec: Any, path: str = "activation") -> nn.Module:
    """Build the activation named by ``spec``: ``"gelu"`` or ``{name: lrelu, negative_slope: 0.2}``."""
    name, options = split_spec(spec, path, "activation")
    factory = ACTIVATIONS.get(name, path=path)
    check_kwargs(factory, options, path, f"activation {name!r}")
    check_arg_types(factory, options, path)
    # nn.Identity swallows any argument; it takes none that matter.
    return factory(**options) if options else factory()
