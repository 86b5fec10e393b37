"""Multi-layer perceptron over flattened inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from modelforge.config import require_positive, require_probability
from modelforge.layers.activations import make_activation
from modelforge.layers.blocks import LinearBlock
from modelforge.registry import MODELS


class MLP(nn.Module):
    """Flatten, linear blocks over ``hidden_sizes``, then a linear classifier."""

    def __init__(
        self,
        in_channels: int = 1,
        input_size: tuple[int, int] | list[int] = (28, 28),
        n_classes: int = 10,
        hidden_sizes: list[int] = (256, 128),
        activation: Any = "relu",
        norm: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.input_shape = (in_channels, *input_size)
        widths = [math.prod(self.input_shape), *hidden_sizes]
        self.flatten = nn.Flatten()
        self.hidden = nn.Sequential(
            *[LinearBlock(f_in, f_out, activation, norm, dropout) for f_in, f_out in zip(widths, widths[1:])]
        )
        self.head = nn.Linear(widths[-1], n_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.hidden(self.flatten(x)))


@dataclass
class MLPConfig:
    """Options of ``model=mlp``."""

    name: str = "mlp"
    in_channels: int = 1
    input_size: list[int] = field(default_factory=lambda: [28, 28])
    n_classes: int = 10
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 128])
    activation: Any = "relu"
    norm: bool = False
    dropout: float = 0.0
    init: dict[str, Any] = field(default_factory=dict)

    def check(self, path: str) -> None:
        for key in ("in_channels", "n_classes", "input_size"):
            require_positive(getattr(self, key), f"{path}.{key}")
        require_positive(self.hidden_sizes, f"{path}.hidden_sizes", allow_empty=True)
        require_probability(self.dropout, f"{path}.dropout")
        make_activation(self.activation, f"{path}.activation")


MODELS.add("mlp", MLP, schema=MLPConfig, description="Linear blocks over hidden_sizes on flattened input")
