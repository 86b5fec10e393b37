"""Blocks: small ``nn.Sequential`` stacks built from plain arguments.

A block never sees a config object. ``None`` (or ``False``) for an optional
layer means "leave it out", as in torchvision's ``Conv2dNormActivation``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from modelforge.errors import ConfigError
from modelforge.layers.activations import make_activation
from modelforge.layers.arithmetic import Add  # noqa: F401  (registered there; importable here as before)
from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS

POOLS = {"max": nn.MaxPool2d, "avg": nn.AvgPool2d}


def _activation_name(spec: Any) -> str:
    return spec if isinstance(spec, str) else str(dict(spec).get("name", spec)) if spec else "none"


@BLOCKS.register("conv")
@counts_from_children
class ConvBlock(nn.Sequential):
    """Conv2d -> BatchNorm2d -> activation, then optional pooling and dropout (``groups=in_channels``: depthwise)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        padding: int | None = None,
        activation: Any = "relu",
        norm: bool = True,
        pool: str | None = None,
        pool_size: int = 2,
        dropout: float = 0.0,
        bias: bool = True,
        groups: int = 1,
    ) -> None:
        padding = kernel_size // 2 if padding is None else padding
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        layers["conv"] = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=bias)
        if norm:
            layers["norm"] = nn.BatchNorm2d(out_channels)
        if activation:
            layers["act"] = make_activation(activation)
        if pool:
            if pool not in POOLS:
                raise ConfigError("pool", f"unknown pooling {pool!r}", allowed=sorted(POOLS))
            layers["pool"] = POOLS[pool](pool_size)
        if dropout:
            layers["drop"] = nn.Dropout2d(dropout)
        super().__init__(layers)
        self._summary = (
            f"{in_channels} -> {out_channels}, kernel={kernel_size}, stride={stride}, padding={padding}, "
            f"norm={bool(norm)}, act={_activation_name(activation)}, pool={pool or 'none'}, dropout={dropout}"
            + (f", groups={groups}" if groups != 1 else "")
        )

    def extra_repr(self) -> str:
        return self._summary


@BLOCKS.register("linear")
@counts_from_children
class LinearBlock(nn.Sequential):
    """Linear -> optional BatchNorm1d -> activation -> optional dropout."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        activation: Any = "relu",
        norm: bool = False,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        layers["linear"] = nn.Linear(in_features, out_features, bias=bias)
        if norm:
            layers["norm"] = nn.BatchNorm1d(out_features)
        if activation:
            layers["act"] = make_activation(activation)
        if dropout:
            layers["drop"] = nn.Dropout(dropout)
        super().__init__(layers)
        self._summary = (
            f"{in_features} -> {out_features}, norm={bool(norm)}, "
            f"act={_activation_name(activation)}, dropout={dropout}"
        )

    def extra_repr(self) -> str:
        return self._summary


@BLOCKS.register("pool")
@counts_from_children
class Pool(nn.Module):
    """2-D max or average pooling (kind: max | avg)."""

    def __init__(self, kind: str = "max", size: int = 2) -> None:
        super().__init__()
        if kind not in POOLS:
            raise ConfigError("kind", f"unknown pooling {kind!r}", allowed=sorted(POOLS))
        self.kind, self.size = kind, size
        self.pool = POOLS[kind](size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)

    def extra_repr(self) -> str:
        return f"kind={self.kind}, size={self.size}"


BLOCKS.add("flatten", nn.Flatten, description="Flatten all but the batch dimension (nn.Flatten: start_dim=1, end_dim=-1)")
BLOCKS.add("global_avg_pool", lambda: nn.AdaptiveAvgPool2d(1), description="Average each channel to 1x1")
BLOCKS.add("dropout", nn.Dropout, description="Dropout with probability p")
BLOCKS.add("activation", make_activation, description="A lone activation, e.g. {spec: relu}")


@BLOCKS.register("concat")
@counts_from_children
class Concat(nn.Module):
    """Merge node: concatenation of its inputs along ``dim`` (channels by default)."""

    dim_args = ("dim",)

    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.cat(inputs, dim=self.dim)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """All inputs of one shape but along ``dim``."""
        def without_dim(shape: Sequence[int]) -> list[int]:
            rest = list(shape)
            if len(rest) == len(shapes[0]) and -len(rest) <= self.dim < len(rest):
                rest.pop(self.dim)
            return rest

        same = all(without_dim(s) == without_dim(shapes[0]) for s in shapes)
        return None if same else f"cannot concatenate along dim {self.dim} inputs of shapes"

    def extra_repr(self) -> str:
        return f"dim={self.dim}"

