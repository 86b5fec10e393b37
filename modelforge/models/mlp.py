"""Multi-layer perceptron over flattened inputs.

The constructor's signature is the one home of every default; the config
schema of ``model=mlp`` is read from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor, nn

from modelforge.config import (
    require_positive,
    require_probability,
    schema_from_signature,
)
from modelforge.layers.activations import make_activation
from modelforge.layers.blocks import LinearBlock
from modelforge.layers.initializers import initialize
from modelforge.layers.macs import counts_from_children
from modelforge.models.param_cap import PARAM_CAP_OPTION, activation_shapes, check_sizes
from modelforge.registry import MODELS


@counts_from_children
class MLP(nn.Module):
    """Flatten, linear blocks over ``hidden_sizes``, then a linear classifier.

    ``init`` is applied with ``model.apply`` (``None`` keeps PyTorch's init).
    """

    def __init__(
        self,
        in_channels: int = 1,
        input_size: Sequence[int] = (28, 28),
        n_classes: int | None = 10,
        hidden_sizes: Sequence[int] = (256, 128),
        activation: Any = "relu",
        norm: bool = False,
        dropout: float = 0.1,
        init: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.input_shape = (in_channels, *input_size)
        widths = [math.prod(self.input_shape), *hidden_sizes]
        self.flatten = nn.Flatten()
        self.hidden = nn.Sequential(
            *[LinearBlock(f_in, f_out, activation, norm, dropout) for f_in, f_out in zip(widths, widths[1:])]
        )
        # n_classes null: no head, the last hidden layer's features are the output
        self.head = nn.Linear(widths[-1], n_classes) if n_classes is not None else nn.Identity()
        self.output_shape = (n_classes if n_classes is not None else widths[-1],)  # per sample
        initialize(self, init or {})

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.hidden(self.flatten(x)))


def check_mlp(cfg: Any, path: str) -> None:
    """The rules of an MLP config that types cannot say."""
    if cfg.n_classes is not None:
        require_positive(cfg.n_classes, f"{path}.n_classes")
    for key in ("in_channels", "input_size"):
        require_positive(getattr(cfg, key), f"{path}.{key}")
    require_positive(cfg.hidden_sizes, f"{path}.hidden_sizes", allow_empty=True)
    require_probability(cfg.dropout, f"{path}.dropout")
    make_activation(cfg.activation, f"{path}.activation")
    check_sizes(_tensor_shapes(cfg), cfg.max_params, path)  # before anything is allocated


def _tensor_shapes(cfg: Any) -> list[tuple[str, list[int]]]:
    """The parameters and buffers an MLP of these options holds (name, shape), counted without making it."""
    widths = [math.prod([cfg.in_channels, *cfg.input_size]), *cfg.hidden_sizes]
    shapes: list[tuple[str, list[int]]] = []
    for i, (f_in, f_out) in enumerate(zip(widths, widths[1:])):
        shapes += [(f"hidden.{i}.linear.weight", [f_out, f_in]), (f"hidden.{i}.linear.bias", [f_out])]
        if cfg.norm:
            shapes += [(f"hidden.{i}.norm.{n}", [f_out]) for n in ("weight", "bias", "running_mean", "running_var")]
            shapes.append((f"hidden.{i}.norm.num_batches_tracked", []))
        shapes += activation_shapes(cfg.activation, f"hidden.{i}.act")
    if cfg.n_classes is not None:
        shapes += [("head.weight", [cfg.n_classes, widths[-1]]), ("head.bias", [cfg.n_classes])]
    return shapes


MLPConfig = schema_from_signature(MLP, "mlp", check=check_mlp, extra=PARAM_CAP_OPTION)

MODELS.add("mlp", MLP, schema=MLPConfig, description="Linear blocks over hidden_sizes on flattened input")
