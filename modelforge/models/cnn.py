"""Convolutional classifier: conv-block encoder, flatten, linear-block decoder, classifier.

The constructor's signature is the one home of every default; the config
schema of ``model=cnn`` (and of the ``seed_cnn`` variant) is read from it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from torch import Tensor, nn

from modelforge.config import (
    require_positive,
    require_probability,
    schema_from_signature,
)
from modelforge.errors import ConfigError
from modelforge.layers.activations import make_activation
from modelforge.layers.blocks import ConvBlock, LinearBlock
from modelforge.layers.initializers import initialize
from modelforge.layers.macs import counts_from_children
from modelforge.models.param_cap import PARAM_CAP_OPTION, activation_shapes, check_sizes
from modelforge.models.shapes import encoder_sizes
from modelforge.registry import MODELS

# He init for the ReLU convs (PyTorch's default kaiming_uniform(a=sqrt(5)) is
# tuned for no activation at all); linear layers, biases and norms keep PyTorch's.
# Every rule is spelled out so `model.init.linear=...` overrides an existing key.
KAIMING_CONVS: Mapping[str, Any] = {"conv": "kaiming_normal", "linear": "default", "bias": "default", "norm": "default"}


@counts_from_children
class CNN(nn.Module):
    """Conv blocks over ``[in_channels, *enc_sizes]``, then linear blocks over ``dec_sizes``.

    The decoder's input width is computed from the encoder's output shape, so
    changing ``enc_sizes``, pooling or ``input_size`` needs nothing else.
    ``dec_activation=None`` means the same as ``activation``; ``init`` is
    applied with ``model.apply`` (rules conv, linear, bias, norm; ``None`` keeps PyTorch's).
    """

    def __init__(
        self,
        in_channels: int = 1,
        input_size: Sequence[int] = (28, 28),
        n_classes: int | None = 10,
        enc_sizes: Sequence[int] = (32, 64),
        dec_sizes: Sequence[int] = (128,),
        activation: Any = "relu",
        dec_activation: Any = None,
        kernel_size: int = 3,
        stride: int = 1,
        padding: int | None = None,
        norm: bool = True,
        pool: Literal["max", "avg"] | None = "max",
        pool_size: int = 2,
        enc_dropout: float = 0.0,
        dropout: float = 0.25,
        init: Mapping[str, Any] | None = KAIMING_CONVS,
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
        # n_classes null: no head, the decoder's features are the output
        self.head = nn.Linear(widths[-1], n_classes) if n_classes is not None else nn.Identity()
        self.output_shape = (n_classes if n_classes is not None else widths[-1],)  # per sample
        initialize(self, init or {})

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.decoder(self.flatten(self.encoder(x))))


# The seeds' CNNClassifier(in_c=1, enc_sizes=[32, 64], dec_sizes=[1024]): its
# deliberate differences from CNN's defaults, all here. 3x3 convs with padding 1,
# no pooling (a 64*28*28 -> 1024 decoder layer), ReLU everywhere (dec_activation
# stays None = activation), no dropout and PyTorch's own init, as in the posts.
seed_cnn = functools.partial(CNN, dec_sizes=(1024,), padding=1, pool=None, dropout=0.0, init=None)


def check_cnn(cfg: Any, path: str) -> None:
    """The rules of a CNN config that types cannot say."""
    if cfg.n_classes is not None:
        require_positive(cfg.n_classes, f"{path}.n_classes")
    for key in ("in_channels", "enc_sizes", "kernel_size", "stride", "pool_size"):
        require_positive(getattr(cfg, key), f"{path}.{key}")
    require_positive(cfg.dec_sizes, f"{path}.dec_sizes", allow_empty=True)
    require_positive(cfg.input_size, f"{path}.input_size")
    if len(cfg.input_size) != 2:
        raise ConfigError(f"{path}.input_size", f"expected [height, width], got {list(cfg.input_size)}")
    if cfg.padding is not None and cfg.padding < 0:
        raise ConfigError(f"{path}.padding", f"must be >= 0, got {cfg.padding}")
    require_probability(cfg.dropout, f"{path}.dropout")
    require_probability(cfg.enc_dropout, f"{path}.enc_dropout")
    make_activation(cfg.activation, f"{path}.activation")
    if cfg.dec_activation is not None:
        make_activation(cfg.dec_activation, f"{path}.dec_activation")
    _check_shapes(cfg, path)
    check_sizes(_tensor_shapes(cfg), cfg.max_params, path)  # before anything is allocated


def _tensor_shapes(cfg: Any) -> list[tuple[str, list[int]]]:
    """The parameters and buffers a CNN of these options holds (name, shape), counted without making it."""
    padding = cfg.kernel_size // 2 if cfg.padding is None else cfg.padding
    channels = [cfg.in_channels, *cfg.enc_sizes]
    shapes: list[tuple[str, list[int]]] = []
    for i, (c_in, c_out) in enumerate(zip(channels, channels[1:])):
        shapes += [(f"encoder.{i}.conv.weight", [c_out, c_in, cfg.kernel_size, cfg.kernel_size]),
                   (f"encoder.{i}.conv.bias", [c_out])]
        if cfg.norm:
            shapes += [(f"encoder.{i}.norm.{n}", [c_out]) for n in ("weight", "bias", "running_mean", "running_var")]
            shapes.append((f"encoder.{i}.norm.num_batches_tracked", []))
        shapes += activation_shapes(cfg.activation, f"encoder.{i}.act")
    h, w = encoder_sizes(cfg.input_size, len(cfg.enc_sizes), cfg.kernel_size, cfg.stride, padding,
                         cfg.pool_size if cfg.pool else None)[-1]
    widths = [channels[-1] * h * w, *cfg.dec_sizes]
    activation = cfg.activation if cfg.dec_activation is None else cfg.dec_activation
    for i, (f_in, f_out) in enumerate(zip(widths, widths[1:])):
        shapes += [(f"decoder.{i}.linear.weight", [f_out, f_in]), (f"decoder.{i}.linear.bias", [f_out]),
                   *activation_shapes(activation, f"decoder.{i}.act")]
    if cfg.n_classes is not None:
        shapes += [("head.weight", [cfg.n_classes, widths[-1]]), ("head.bias", [cfg.n_classes])]
    return shapes


def _check_shapes(cfg: Any, path: str) -> None:
    padding = cfg.kernel_size // 2 if cfg.padding is None else cfg.padding
    h, w = cfg.input_size
    for i, size in enumerate(cfg.enc_sizes):
        if cfg.kernel_size > min(h, w) + 2 * padding:
            raise ConfigError(
                f"{path}.kernel_size",
                f"kernel {cfg.kernel_size} is larger than the {h}x{w} feature map "
                f"(padding {padding}) that encoder layer {i} (enc_sizes[{i}]={size}) meets",
                hint="use a smaller kernel, fewer enc_sizes, or pool=null",
            )
        h, w = encoder_sizes((h, w), 1, cfg.kernel_size, cfg.stride, padding, cfg.pool_size if cfg.pool else None)[0]
        if h < 1 or w < 1:
            raise ConfigError(
                f"{path}.enc_sizes",
                f"the feature map shrinks to nothing after encoder layer {i} of {len(cfg.enc_sizes)}",
                hint="use fewer enc_sizes, stride 1, or pool=null",
            )


CNNConfig = schema_from_signature(CNN, "cnn", check=check_cnn, extra=PARAM_CAP_OPTION)
SeedCNNConfig = schema_from_signature(seed_cnn, "seed_cnn", check=check_cnn, extra=PARAM_CAP_OPTION)

MODELS.add("cnn", CNN, schema=CNNConfig, description="Conv-block encoder + linear-block decoder + classifier head")
MODELS.add(
    "seed_cnn",
    seed_cnn,
    schema=SeedCNNConfig,
    description="The seeds' CNNClassifier: 3x3 convs, BatchNorm, ReLU, no pooling, ReLU decoder, 28x28 input",
)
