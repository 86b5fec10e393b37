"""Blocks that reshape, split, reduce or extend tensors, for graphs of several inputs and outputs.

``chunk`` and ``split`` return a tuple, whose parts a graph node reads as
``<node>.0``, ``<node>.1``. ``reshape`` keeps the batch dimension and reshapes
each sample (a 0 at either end of its shape keeps that size of the input, so it is
right at any input size); ``permute`` and ``transpose`` name dimensions as torch does (0 is the
batch). None of them may touch the batch dimension of an input that has one (``dim_args``,
``batch_problem``: :mod:`modelforge.layers.batch_dim`); on a ``parameter`` or a ``constant``
every dimension is theirs. ``class_token`` and ``position_embedding`` are the two learned tensors of
a vision transformer; their widths are inferred like any block's (``in_features``
from the last dimension, ``num_tokens`` from the second). ``flatten`` is
``nn.Flatten`` (``start_dim``, ``end_dim``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from modelforge.config_types import check_type
from modelforge.errors import ConfigError
from modelforge.layers.batch_dim import BatchProblem
from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS


def _int_list(value: int | Sequence[int], name: str) -> list[int]:
    check_type(value, int | list[int], name)
    values = [value] if isinstance(value, int) else list(value)
    if not values:
        raise ConfigError(name, "must not be empty", allowed="int or list of int")
    return values


def _int(value: int, name: str) -> int:
    check_type(value, int, name)
    return value


@BLOCKS.register("chunk")
@counts_from_children
class Chunk(nn.Module):
    """Split into `chunks` equal parts along `dim`; a tuple, read as node.0, node.1, ..."""

    dim_args = ("dim",)

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

    dim_args = ("dim",)

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

    dim_args = ("dim",)

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

    dim_args = ("dim0", "dim1")

    def __init__(self, dim0: int = 1, dim1: int = 2) -> None:
        super().__init__()
        self.dim0, self.dim1 = dim0, dim1

    def forward(self, x: Tensor) -> Tensor:
        return x.transpose(self.dim0, self.dim1)

    def extra_repr(self) -> str:
        return f"dim0={self.dim0}, dim1={self.dim1}"


@BLOCKS.register("reshape")
@counts_from_children
class Reshape(nn.Module):
    """Reshape each sample to `shape` (the batch dimension is kept; -1: inferred; 0 at either end: kept as is).

    A 0 among the leading entries keeps the input's size at that place counted from the start
    (after the batch), a 0 among the trailing ones counted from the end: ``[groups, -1, 0, 0]``
    splits the channels of [B, C, H, W] into groups whatever H and W are (a channel shuffle).
    """

    def __init__(self, shape: list[int]) -> None:
        super().__init__()
        self.shape = _int_list(shape, "shape")
        lead = next((i for i, s in enumerate(self.shape) if s != 0), len(self.shape))
        trail = next((i for i, s in enumerate(reversed(self.shape[lead:])) if s != 0), 0)
        self._lead, self._trail = lead, trail
        middle = self.shape[lead:len(self.shape) - trail]
        if middle.count(-1) > 1 or any(s < -1 or s == 0 for s in middle):
            raise ConfigError("shape", f"cannot reshape to {self.shape}",
                              allowed="sizes >= 1, at most one -1 (inferred) and 0 (kept) only at either end, "
                                      "without the batch dimension")

    def _sizes(self, dims: Sequence[int]) -> list[int]:
        middle = self.shape[self._lead:len(self.shape) - self._trail]
        return [*dims[:self._lead], *middle, *dims[len(dims) - self._trail:]]

    def forward(self, x: Tensor) -> Tensor:
        sizes = self._sizes(x.shape[1:]) if self._lead or self._trail else list(self.shape)
        if -1 in sizes:  # inferred from the sample, not the batch: torch cannot infer it for an empty batch
            known = math.prod(s for s in sizes if s != -1)
            sample = math.prod(x.shape[1:])
            if known and sample % known == 0:
                sizes[sizes.index(-1)] = sample // known
        return x.reshape(x.shape[0], *sizes)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """Each 0 keeps a size the input has, and the sizes hold a sample's values (a -1: a whole number of them).
        Checked here, as the empty batch a graph is built on takes any shape: [0, 64, 2, 7, 2, 7] from [0, 64, 16, 16]."""
        if len(shapes) != 1:
            return None
        kept, sample = self._lead + self._trail, list(shapes[0][1:])
        if kept > len(sample):
            return f"keeps {kept} sizes of its input (the 0s of {self.shape}), but its input has {len(sample)}:"
        sizes, values = self._sizes(sample) if kept else list(self.shape), math.prod(sample)
        known = math.prod(s for s in sizes if s != -1)
        if (known != values) if -1 not in sizes else (known == 0 or values % known != 0):
            return f"cannot reshape {values} values per sample to {sizes}:"
        return None

    def extra_repr(self) -> str:
        return f"shape={self.shape}"


@BLOCKS.register("permute")
@counts_from_children
class Permute(nn.Module):
    """Reorder all dimensions, the batch's (0) first: [0, 2, 3, 1] makes [B, C, H, W] channels-last."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.dims = _int_list(dims, "dims")
        if sorted(self.dims) != list(range(len(self.dims))):
            raise ConfigError("dims", f"{self.dims} is not an order of dimensions",
                              allowed=f"each of 0..{len(self.dims) - 1} once, 0 being the batch dimension")

    def forward(self, x: Tensor) -> Tensor:
        return x.permute(*self.dims)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """An order of as many dimensions as the input has."""
        if len(shapes) == 1 and len(shapes[0]) != len(self.dims):
            return f"orders {len(self.dims)} dimensions ({self.dims}), but its input has {len(shapes[0])}:"
        return None

    def batch_problem(self, shapes: Sequence[Sequence[int]], batched: Sequence[bool]) -> BatchProblem | None:
        """The batch dimension stays first."""
        if batched[0] and self.dims and self.dims[0] != 0:
            return BatchProblem("dims", f"{self.dims} moves the batch dimension (0) of its input to place "
                                f"{self.dims.index(0)}",
                                f"an order that keeps 0 first, e.g. {[0, *sorted(d for d in self.dims if d)]}")
        return None

    def extra_repr(self) -> str:
        return f"dims={self.dims}"


@BLOCKS.register("mean")
@counts_from_children
class Mean(nn.Module):
    """Average over `dim` (one or a list; [2, 3]: over H and W), keeping those dimensions as 1 if `keepdim`."""

    dim_args = ("dim",)

    def __init__(self, dim: int | list[int], keepdim: bool = False) -> None:
        super().__init__()
        self.dim, self.keepdim = _int_list(dim, "dim"), keepdim

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=self.dim, keepdim=self.keepdim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, keepdim={self.keepdim}"


@BLOCKS.register("sum")
@counts_from_children
class Sum(nn.Module):
    """Sum over `dim` (one or a list), keeping those dimensions as 1 if `keepdim`."""

    dim_args = ("dim",)

    def __init__(self, dim: int | list[int], keepdim: bool = False) -> None:
        super().__init__()
        self.dim, self.keepdim = _int_list(dim, "dim"), keepdim

    def forward(self, x: Tensor) -> Tensor:
        return x.sum(dim=self.dim, keepdim=self.keepdim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, keepdim={self.keepdim}"


@BLOCKS.register("unbind")
@counts_from_children
class Unbind(nn.Module):
    """Every slice along `dim`, that dimension dropped; a tuple, read as node.0, node.1, ... (q, k, v of one tensor)."""

    dim_args = ("dim",)

    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = _int(dim, "dim")

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return x.unbind(self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


@BLOCKS.register("softmax")
@counts_from_children
class Softmax(nn.Module):
    """Softmax along `dim` (the last by default: attention weights over the keys)."""

    dim_args = ("dim",)

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return x.softmax(dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


@BLOCKS.register("class_token")
@counts_from_children
class ClassToken(nn.Module):
    """Prepend one learned token to a [B, L, D] sequence, giving [B, L + 1, D]."""

    def __init__(self, in_features: int) -> None:
        super().__init__()
        self.token = nn.Parameter(torch.zeros(1, 1, in_features))

    def reset_parameters(self) -> None:
        """Zeros again (torch's convention: also after ``to_empty`` of a module built on meta)."""
        with torch.no_grad():
            self.token.zero_()

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.token.expand(x.shape[0], -1, -1), x], dim=1)


@BLOCKS.register("position_embedding")
@counts_from_children
class PositionEmbedding(nn.Module):
    """Add a learned embedding per position to a [B, num_tokens, in_features] sequence."""

    def __init__(self, num_tokens: int, in_features: int, std: float = 0.02) -> None:
        super().__init__()
        self.std = std
        self.embedding = nn.Parameter(torch.randn(1, num_tokens, in_features) * std)

    def reset_parameters(self) -> None:
        """A new draw from N(0, std^2) (torch's convention: also after ``to_empty`` of a module built on meta)."""
        with torch.no_grad():
            self.embedding.normal_(0.0, self.std)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.embedding
