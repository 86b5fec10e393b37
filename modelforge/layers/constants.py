"""Fixed tensors as graph nodes: ``constant`` (built from a number or a formula) and ``take`` (a lookup by index).

A ``constant`` reads no input (``inputs: []``) and returns a buffer computed once, when the model
is built, from its ``shape`` and ``value``: a number, or a formula of each element's indices
(``lambda i, j: i - j``; see :mod:`modelforge.layers.expressions`). It is not learned and not
saved (a non-persistent buffer: the config makes it again), and has no batch dimension. Swin's
relative position index is one:
``{block: constant, args: {shape: [49, 49], value: 'lambda i, j: (i // 7 - j // 7 + 6) * 13 + i % 7 - j % 7 + 6'}}``.

``take`` looks entries of its first input up by the integer indices of its second along ``dim``,
as ``numpy.take`` does: a table ``[169, heads]`` by an index ``[49, 49]`` gives ``[49, 49, heads]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.config_types import check_type
from modelforge.errors import ConfigError
from modelforge.layers.expressions import ElementFormula
from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
          "bool": torch.bool}
MAX_CONSTANT_ELEMENTS = 2**26  # 64 Mi elements (256 MB of float32): far above any mask or index a model needs


@BLOCKS.register("constant")
@counts_from_children
class Constant(nn.Module):
    """A fixed tensor of `shape` holding `value`: a number, or a formula of its indices ('lambda i, j: ...')."""

    def __init__(self, shape: list[int], value: Any = 0.0, dtype: str | None = None) -> None:
        super().__init__()
        sizes = [shape] if isinstance(shape, int) else list(shape) if isinstance(shape, (list, tuple)) else None
        if sizes is None or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
            raise ConfigError("shape", f"cannot make a tensor of shape {shape!r}", allowed="a list of sizes >= 1")
        if math.prod(sizes) > MAX_CONSTANT_ELEMENTS:
            raise ConfigError("shape", f"{sizes} is {math.prod(sizes):,} elements, more than a constant may hold "
                              f"({MAX_CONSTANT_ELEMENTS:,})")
        if not isinstance(value, (ElementFormula, int, float)):
            raise ConfigError("value", f"expected a number or a formula 'lambda i, j: ...', got "
                              f"{type(value).__name__} {value!r}",
                              hint="a formula names one index per dimension: lambda i, j: i - j for a 2-D shape")
        if dtype is not None and dtype not in DTYPES:
            raise ConfigError("dtype", f"unknown dtype {dtype!r}", allowed=list(DTYPES))
        self.sizes, self.value, self.dtype = sizes, value, dtype
        self.register_buffer("tensor", self._make(), persistent=False)

    def _make(self) -> Tensor:
        value = self.value.over(self.sizes) if isinstance(self.value, ElementFormula) else torch.tensor(self.value)
        dtype = DTYPES[self.dtype] if self.dtype else torch.get_default_dtype() if value.is_floating_point() else None
        return value.expand(self.sizes).to(dtype).clone() if dtype else value.expand(self.sizes).clone()

    def reset_parameters(self) -> None:
        """Compute the tensor again (after ``to_empty``, as a module built on the meta device is filled)."""
        with torch.no_grad():
            self.tensor.copy_(self._make())

    def forward(self) -> Tensor:
        return self.tensor

    def extra_repr(self) -> str:
        return f"shape={self.sizes}, value={self.value}, dtype={self.tensor.dtype}"


@BLOCKS.register("take")
@counts_from_children
class Take(nn.Module):
    """Entries of the first input looked up along `dim` by the integer indices of the second (numpy.take)."""

    dim_args = ("dim",)

    def __init__(self, dim: int = 0) -> None:
        super().__init__()
        check_type(dim, int, "dim")
        self.dim = dim

    def forward(self, table: Tensor, index: Tensor) -> Tensor:
        dim = self.dim % table.dim()
        if index.dim() == 0:
            return table.select(dim, index)
        return table.index_select(dim, index.reshape(-1)).unflatten(dim, index.shape)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """A table with the dimension, and an index."""
        if len(shapes) != 2:
            return f"takes 2 inputs (a table and an index), got {len(shapes)}:"
        if not -len(shapes[0]) <= self.dim < len(shapes[0]):
            return f"looks up along dim {self.dim}, but its table has {len(shapes[0])} dimensions:"
        return None

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
