"""Convolutional classifier: conv-block encoder, flatten, linear-block decoder, classifier."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from torch import Tensor, nn

from modelforge.config import require_positive, require_probability
from modelforge.errors import ConfigError
from modelforge.layers.activations import make_activation
from modelforge.layers.blocks import ConvBlock, LinearBlock
from modelforge.models.shapes import encoder_sizes
from modelforge.registry import MODELS


class CNN(nn.Module):
    """Conv blocks over ``[in_channels, *enc_sizes]``, then linear blocks over ``dec_sizes``.

    The decoder's input width is computed from the encoder's output shape, so
    changing ``enc_sizes``, pooling or ``input_size`` needs nothing else.
    """

    def __init__(
        self,
        in_channels: int = 1,
        input_size: tuple[int, int] | list[int] = (28, 28),
        n_classes: int = 10,
        enc_sizes: list[int] = (32, 64),
        dec_sizes: list[int] = (128,),
        activation: Any = "relu",
        dec_activation: Any = None,
        kernel_size: int = 3,
        stride: int = 1,
        padding: int | None = None,
        norm: bool = True,
        pool: str | None = "max",
        pool_size: int = 2,
        enc_dropout: float = 0.0,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        padding = kernel_size // 2 if padding is None else padding
        self.input_shape = (in_channels, *input_size)
        channels = [in_channels, *enc_sizes]
        self.encoder = nn.Sequential(
            *[
                ConvBlock(c_in, c_out, kernel_size, stride, padding, activation, norm, pool, pool_size, enc_dropout)
                for c_in, c_out in zip(channels, channels[1:])
            ]
        )
        h, w = encoder_sizes(input_size, len(enc_sizes), kernel_size, stride, padding, pool_size if pool else None)[-1]
        widths = [channels[-1] * h * w, *dec_sizes]
        dec_activation = activation if dec_activation is None else dec_activation
        self.flatten = nn.Flatten()
        self.decoder = nn.Sequential(
            *[LinearBlock(f_in, f_out, dec_activation, dropout=dropout) for f_in, f_out in zip(widths, widths[1:])]
        )
        self.head = nn.Linear(widths[-1], n_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.decoder(self.flatten(self.encoder(x))))


@dataclass
class CNNConfig:
    """Options of ``model=cnn`` (``name`` picks the builder; ``init`` the weight init)."""

    name: str = "cnn"
    in_channels: int = 1
    input_size: list[int] = field(default_factory=lambda: [28, 28])
    n_classes: int = 10
    enc_sizes: list[int] = field(default_factory=lambda: [32, 64])
    dec_sizes: list[int] = field(default_factory=lambda: [128])
    activation: Any = "relu"
    dec_activation: Any = None
    kernel_size: int = 3
    stride: int = 1
    padding: int | None = None
    norm: bool = True
    pool: Literal["max", "avg"] | None = "max"
    pool_size: int = 2
    enc_dropout: float = 0.0
    dropout: float = 0.0
    init: dict[str, Any] = field(default_factory=dict)

    def check(self, path: str) -> None:
        for key in ("in_channels", "n_classes", "enc_sizes", "kernel_size", "stride", "pool_size"):
            require_positive(getattr(self, key), f"{path}.{key}")
        require_positive(self.dec_sizes, f"{path}.dec_sizes", allow_empty=True)
        require_positive(self.input_size, f"{path}.input_size")
        if len(self.input_size) != 2:
            raise ConfigError(f"{path}.input_size", f"expected [height, width], got {self.input_size}")
        if self.padding is not None and self.padding < 0:
            raise ConfigError(f"{path}.padding", f"must be >= 0, got {self.padding}")
        require_probability(self.dropout, f"{path}.dropout")
        require_probability(self.enc_dropout, f"{path}.enc_dropout")
        make_activation(self.activation, f"{path}.activation")
        if self.dec_activation is not None:
            make_activation(self.dec_activation, f"{path}.dec_activation")
        self._check_shapes(path)

    def _check_shapes(self, path: str) -> None:
        padding = self.kernel_size // 2 if self.padding is None else self.padding
        h, w = self.input_size
        for i, size in enumerate(self.enc_sizes):
            if self.kernel_size > min(h, w) + 2 * padding:
                raise ConfigError(
                    f"{path}.kernel_size",
                    f"kernel {self.kernel_size} is larger than the {h}x{w} feature map "
                    f"(padding {padding}) that encoder layer {i} (enc_sizes[{i}]={size}) meets",
                    hint="use a smaller kernel, fewer enc_sizes, or pool=null",
                )
            h, w = encoder_sizes((h, w), 1, self.kernel_size, self.stride, padding, self.pool_size if self.pool else None)[0]
            if h < 1 or w < 1:
                raise ConfigError(
                    f"{path}.enc_sizes",
                    f"the feature map shrinks to nothing after encoder layer {i} of {len(self.enc_sizes)}",
                    hint="use fewer enc_sizes, stride 1, or pool=null",
                )
        if math.prod((self.enc_sizes[-1], h, w)) <= 0:  # pragma: no cover - guarded above
            raise ConfigError(f"{path}.enc_sizes", "the encoder output is empty")


@dataclass
class SeedCNNConfig(CNNConfig):
    """The seeds' ``CNNClassifier(in_c=1, enc_sizes=[32,64], dec_sizes=[1024])``: 3x3, padding 1, no pooling."""

    name: str = "seed_cnn"
    dec_sizes: list[int] = field(default_factory=lambda: [1024])
    dec_activation: Any = "sigmoid"
    padding: int | None = 1
    pool: Literal["max", "avg"] | None = None


MODELS.add("cnn", CNN, schema=CNNConfig, description="Conv-block encoder + linear-block decoder + classifier head")
MODELS.add(
    "seed_cnn",
    CNN,
    schema=SeedCNNConfig,
    description="The seeds' CNNClassifier: 3x3 convs, BatchNorm, ReLU, no pooling, 28x28 input",
)
