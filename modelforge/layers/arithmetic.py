"""Arithmetic nodes over several tensors: element-wise ``mul``, ``sub``, ``div`` and the matrix product ``matmul``.

The element-wise ones broadcast as torch does, so a squeeze-and-excitation gate of shape
``[B, C, 1, 1]`` scales a ``[B, C, H, W]`` map and a layer-scale ``parameter`` of shape ``[C, 1, 1]``
scales every sample. One broadcast is refused: a result of a shape none of the inputs has
(``[B, C] * [B, C, 1, 1]`` is ``[B, C, B, C]``, an outer product by accident, not a gate).

Each block's ``check_shapes`` says, before anything runs, why inputs of these shapes do not fit
(the graph builder calls it with the dry run's shapes). ``matmul`` counts its multiply-accumulates
itself (``own_macs``), as torch's FLOP counter counts the ``bmm`` it runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS


def broadcast_problem(shapes: Sequence[Sequence[int]]) -> str | None:
    """Why tensors of these shapes do not combine element-wise (None: they do)."""
    try:
        result = list(torch.broadcast_shapes(*[torch.Size(s) for s in shapes]))
    except RuntimeError:
        return "do not broadcast"
    if all(list(s) != result for s in shapes):
        return f"broadcast to {result}, the shape of none of them"
    return None


class _Elementwise(nn.Module):
    """An element-wise operation over ``n_inputs`` tensors (None: two or more), broadcasting."""

    verb = "combine"
    n_inputs: int | None = None

    def __init__(self) -> None:  # of its own, so that an argument it does not take is named as such
        super().__init__()

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """Why inputs of these shapes do not fit (None: they do); the builder names the node and shapes."""
        if self.n_inputs is not None and len(shapes) != self.n_inputs:
            return f"takes {self.n_inputs} inputs, got {len(shapes)}:"
        if len(shapes) < 2:
            return f"takes two inputs or more, got {len(shapes)}:"
        problem = broadcast_problem(shapes)
        return f"cannot {self.verb} inputs that {problem}:" if problem else None


@BLOCKS.register("mul")
@counts_from_children
class Mul(_Elementwise):
    """Element-wise product of its inputs, broadcasting (a gate times a feature map, a layer scale)."""

    verb = "multiply"

    def forward(self, *inputs: Tensor) -> Tensor:
        out = inputs[0]
        for x in inputs[1:]:
            out = out * x
        return out


@BLOCKS.register("sub")
@counts_from_children
class Sub(_Elementwise):
    """The first input minus the second, broadcasting."""

    verb, n_inputs = "subtract", 2

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a - b


@BLOCKS.register("div")
@counts_from_children
class Div(_Elementwise):
    """The first input divided by the second, broadcasting."""

    verb, n_inputs = "divide", 2

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a / b


@BLOCKS.register("matmul")
class MatMul(nn.Module):
    """Matrix product of two inputs over their last two dimensions (``torch.matmul``, batch dims broadcast).

    ``transpose_b`` multiplies by the second input's transpose (attention scores: ``q @ k^T``);
    ``scaled`` divides the product by the square root of the shared dimension, as scaled
    dot-product attention does.
    """

    def __init__(self, transpose_b: bool = False, scaled: bool = False) -> None:
        super().__init__()
        self.transpose_b, self.scaled = bool(transpose_b), bool(scaled)

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        out = a @ (b.transpose(-2, -1) if self.transpose_b else b)
        return out * (1.0 / math.sqrt(a.shape[-1])) if self.scaled else out

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """Why inputs of these shapes do not multiply (None: they do)."""
        if len(shapes) != 2:
            return f"takes 2 inputs, got {len(shapes)}:"
        a, b = (list(s) for s in shapes)
        if len(a) < 2 or len(b) < 2:
            return "multiplies matrices (2 dimensions or more), got"
        rows = b[-1] if self.transpose_b else b[-2]
        if a[-1] != rows:
            which = "last" if self.transpose_b else "second-to-last"
            return (f"cannot multiply: the first input's last dimension ({a[-1]}) must equal the second's "
                    f"{which} ({rows}); got")
        if broadcast_problem([a[:-2], b[:-2]]) == "do not broadcast":
            return "cannot multiply: the batch dimensions do not broadcast; got"
        return None

    def own_macs(self, inputs: tuple[Any, ...], output: Tensor) -> int:
        """One multiply-accumulate per output element and shared index (torch's bmm count / 2)."""
        return output.numel() * inputs[0].shape[-1]

    def extra_repr(self) -> str:
        return f"transpose_b={self.transpose_b}, scaled={self.scaled}"
