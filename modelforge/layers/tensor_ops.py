"""Blocks that reshape, split or extend tensors, for graphs of several inputs and outputs.

``chunk`` and ``split`` return a tuple, whose parts a graph node reads as
``<node>.0``, ``<node>.1``. ``class_token`` and ``position_embedding`` are the
two learned tensors of a vision transformer; their widths are inferred like any
block's (``in_features`` from the last dimension, ``num_tokens`` from the second).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS


@BLOCKS.register("chunk")
@counts_from_children
class Chunk(nn.Module):
    """Split into `chunks` equal parts along `dim`; a tuple, read as node.0, node.1, ..."""

    def __init__(self, chunks: int = 2, dim: int = 1) -> None:
        super().__init__()
        self.chunks, self.dim = chunks, dim

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return tuple(x.chunk(self.chunks, self.dim))

    def extra_repr(self) -> str:
        return f"chunks={self.chunks}, dim={self.dim}"


@BLOCKS.register("split")
@counts_from_children
class Split(nn.Module):
    """Split along `dim` into parts of the given `sizes`; a tuple, read as node.0, node.1, ..."""

    def __init__(self, sizes: list[int], dim: int = 1) -> None:
        super().__init__()
        self.sizes, self.dim = list(sizes), dim

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return tuple(x.split(self.sizes, self.dim))

    def extra_repr(self) -> str:
        return f"sizes={self.sizes}, dim={self.dim}"


@BLOCKS.register("select")
@counts_from_children
class Select(nn.Module):
    """Take one `index` along `dim`, dropping that dimension (last step of a sequence: index -1)"""

    def __init__(self, index: int = 0, dim: int = 1) -> None:
        super().__init__()
        self.index, self.dim = index, dim

    def forward(self, x: Tensor) -> Tensor:
        return x.select(self.dim, self.index)

    def extra_repr(self) -> str:
        return f"index={self.index}, dim={self.dim}"


@BLOCKS.register("transpose")
@counts_from_children
class Transpose(nn.Module):
    """Swap two dimensions ([B, C, L] -> [B, L, C] with the defaults)."""

    def __init__(self, dim0: int = 1, dim1: int = 2) -> None:
        super().__init__()
        self.dim0, self.dim1 = dim0, dim1

    def forward(self, x: Tensor) -> Tensor:
        return x.transpose(self.dim0, self.dim1)

    def extra_repr(self) -> str:
        return f"dim0={self.dim0}, dim1={self.dim1}"


@BLOCKS.register("class_token")
@counts_from_children
class ClassToken(nn.Module):
    """Prepend one learned token to a [B, L, D] sequence, giving [B, L + 1, D]."""

    def __init__(self, in_features: int) -> None:
        super().__init__()
        self.token = nn.Parameter(torch.zeros(1, 1, in_features))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.token.expand(x.shape[0], -1, -1), x], dim=1)


@BLOCKS.register("position_embedding")
@counts_from_children
class PositionEmbedding(nn.Module):
    """Add a learned embedding per position to a [B, num_tokens, in_features] sequence."""

    def __init__(self, num_tokens: int, in_features: int, std: float = 0.02) -> None:
        super().__init__()
        self.embedding = nn.Parameter(torch.randn(1, num_tokens, in_features) * std)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.embedding
