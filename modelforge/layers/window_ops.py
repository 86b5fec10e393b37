"""Ops that move, pad and cut a map along some of its dimensions: ``roll``, ``pad_to_multiple``, ``slice``.

What windowed attention (Swin) needs around its windows: pad the map to a multiple of the window,
shift it by half a window (``roll``), and cut the padding off again (``slice``). Each names the
dimensions it works on (``dims``, as torch does; never the batch's of an input that has one) and
works at any input size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from modelforge.config_types import check_type
from modelforge.errors import ConfigError
from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS


def _ints(value: int | Sequence[int], name: str, *, positive: bool = False) -> list[int]:
    check_type(value, int | list[int], name)
    values = [value] if isinstance(value, int) else list(value)
    if not values:
        raise ConfigError(name, "must not be empty", allowed="int or list of int")
    if positive and min(values) < 1:
        raise ConfigError(name, f"must be a size >= 1, got {value!r}", allowed="int >= 1 or list of them")
    return values


def _per_dim(values: list[int], dims: list[int], name: str) -> list[int]:
    """One value per dimension: a single value serves them all."""
    if len(values) == 1:
        return values * len(dims)
    if len(values) != len(dims):
        raise ConfigError(name, f"{values} gives {len(values)} values for {len(dims)} dims {dims}",
                          allowed="one value, or one per dimension of dims")
    return values


def _dims_problem(dims: Sequence[int], shapes: Sequence[Sequence[int]]) -> str | None:
    if len(shapes) == 1 and any(not -len(shapes[0]) <= d < len(shapes[0]) for d in dims):
        return f"works on dims {list(dims)}, but its input has {len(shapes[0])} dimensions:"
    if len({d % len(shapes[0]) for d in dims} if shapes and shapes[0] else dims) != len(dims):
        return f"names one dimension twice in dims {list(dims)}; its input is"
    return None


@BLOCKS.register("roll")
@counts_from_children
class Roll(nn.Module):
    """Shift along `dims` by `shifts`, what falls off one end coming back at the other (torch.roll)."""

    dim_args = ("dims",)

    def __init__(self, shifts: int | list[int], dims: int | list[int]) -> None:
        super().__init__()
        self.dims = _ints(dims, "dims")
        self.shifts = _per_dim(_ints(shifts, "shifts"), self.dims, "shifts")

    def forward(self, x: Tensor) -> Tensor:
        return x.roll(self.shifts, self.dims)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """Dimensions the input has."""
        return _dims_problem(self.dims, shapes)

    def extra_repr(self) -> str:
        return f"shifts={self.shifts}, dims={self.dims}"


@BLOCKS.register("pad_to_multiple")
@counts_from_children
class PadToMultiple(nn.Module):
    """Pad `dims` at their end with `value` up to the next multiple of `multiple` (a map to whole windows)."""

    dim_args = ("dims",)

    def __init__(self, multiple: int | list[int], dims: int | list[int], value: float = 0.0) -> None:
        super().__init__()
        self.dims = _ints(dims, "dims")
        self.multiple = _per_dim(_ints(multiple, "multiple", positive=True), self.dims, "multiple")
        check_type(value, float, "value")
        self.value = value

    def forward(self, x: Tensor) -> Tensor:
        pad = [0, 0] * x.dim()  # F.pad's order: the last dimension first, (before, after) each
        for dim, multiple in zip(self.dims, self.multiple):
            pad[2 * (x.dim() - 1 - dim % x.dim()) + 1] = (multiple - x.shape[dim] % multiple) % multiple
        while len(pad) > 2 and pad[-2:] == [0, 0]:
            pad = pad[:-2]
        return F.pad(x, pad, value=self.value)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """Dimensions the input has."""
        return _dims_problem(self.dims, shapes)

    def extra_repr(self) -> str:
        return f"multiple={self.multiple}, dims={self.dims}" + (f", value={self.value}" if self.value else "")


@BLOCKS.register("slice")
@counts_from_children
class Slice(nn.Module):
    """Keep `start` up to (not including) `end`, every `step`-th, along each of `dims` (x[..., start:end:step, ...])."""

    dim_args = ("dims",)

    def __init__(self, dims: int | list[int], start: int | list[int] = 0, end: int | list[int] | None = None,
                 step: int | list[int] = 1) -> None:
        super().__init__()
        self.dims = _ints(dims, "dims")
        self.start = _per_dim(_ints(start, "start"), self.dims, "start")
        self.end = None if end is None else _per_dim(_ints(end, "end"), self.dims, "end")
        self.step = _per_dim(_ints(step, "step", positive=True), self.dims, "step")

    def forward(self, x: Tensor) -> Tensor:
        index: list[slice] = [slice(None)] * x.dim()
        for i, dim in enumerate(self.dims):
            index[dim] = slice(self.start[i], None if self.end is None else self.end[i], self.step[i])
        return x[tuple(index)]

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """Dimensions the input has, and something left along each."""
        problem = _dims_problem(self.dims, shapes)
        if problem or len(shapes) != 1:
            return problem
        for i, dim in enumerate(self.dims):
            size = shapes[0][dim]
            if not len(range(size)[self.start[i]:None if self.end is None else self.end[i]:self.step[i]]):
                return f"leaves nothing of dim {dim} (size {size}) from {self.start[i]} to {self.end and self.end[i]}:"
        return None

    def extra_repr(self) -> str:
        return f"dims={self.dims}, start={self.start}, end={self.end}, step={self.step}"
