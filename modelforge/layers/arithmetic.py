"""Arithmetic nodes: element-wise ``add``, ``mul``, ``sub``, ``div``, ``neg``, ``compare``, ``masked_fill``
and the matrix product ``matmul``.

``mul``, ``sub`` and ``div`` broadcast as torch does, so a squeeze-and-excitation gate of shape
``[B, C, 1, 1]`` scales a ``[B, C, H, W]`` map and a layer-scale ``parameter`` of shape ``[C, 1, 1]``
scales every sample; ``add`` (a residual sum) wants inputs of one shape unless ``broadcast: true``
(a relative position bias ``[heads, N, N]`` added to scores ``[B, windows, heads, N, N]``).
One broadcast is refused unless asked for with ``outer: true``: a result of a shape none of the
inputs has (``[B, C] * [B, C, 1, 1]`` is ``[B, C, B, C]``, an outer product by accident, not a
gate; ``[W, 1, N] - [W, N, 1]``, the pairs of a window's positions, on purpose).
With ``scalar`` an element-wise op takes one input and a number (``mul`` by -100.0, ``sub`` 1).

Each block's ``check_shapes`` says, before anything runs, why inputs of these shapes do not fit
(the graph builder calls it with the inferred shapes). ``matmul`` counts its multiply-accumulates
itself (``own_macs``), as torch's FLOP counter counts the ``bmm`` it runs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.config_types import check_type
from modelforge.errors import ConfigError, closest_names
from modelforge.layers.batch_dim import BatchProblem, broadcast_batch_problem
from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS


def broadcast_shape(shapes: Sequence[Sequence[int]]) -> list[int]:
    """The shape tensors of these shapes broadcast to (RuntimeError if they do not): ``torch.broadcast_tensors`` of
    views without storage. ``torch.broadcast_shapes`` gives the same, but its first call imports sympy (~0.5 s)."""
    scalar = torch.zeros(())
    return list(torch.broadcast_tensors(*[scalar.expand(list(s)) for s in shapes])[0].shape)


def broadcast_problem(shapes: Sequence[Sequence[int]], outer: bool = False) -> str | None:
    """Why tensors of these shapes do not combine element-wise (None: they do; ``outer``: to any shape)."""
    try:
        result = broadcast_shape(shapes)
    except RuntimeError:
        return "do not broadcast"
    if not outer and all(list(s) != result for s in shapes):
        return f"broadcast to {result}, the shape of none of them"
    return None


def _scalar(value: float | None) -> float | None:
    check_type(value, float | None, "scalar")
    return value


class _Elementwise(nn.Module):
    """An element-wise operation over ``n_inputs`` tensors (None: two or more), broadcasting; with
    ``scalar``, over one tensor and that number."""

    verb = "combine"
    n_inputs: int | None = None
    combine: Callable[[Any, Any], Any] = operator.add

    def __init__(self, scalar: float | None = None, outer: bool = False) -> None:
        super().__init__()
        self.scalar, self.outer = _scalar(scalar), outer

    def forward(self, *inputs: Tensor) -> Tensor:
        if self.scalar is not None:
            return type(self).combine(inputs[0], self.scalar)
        out = inputs[0]
        for x in inputs[1:]:
            out = type(self).combine(out, x)
        return out

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """Why inputs of these shapes do not fit (None: they do); the builder names the node and shapes."""
        if self.scalar is not None:
            return None if len(shapes) == 1 else f"takes one input with a scalar, got {len(shapes)}:"
        if self.n_inputs is not None and len(shapes) != self.n_inputs:
            return f"takes {self.n_inputs} inputs, got {len(shapes)}:"
        if len(shapes) < 2:
            return f"takes two inputs or more (or one and a scalar), got {len(shapes)}:"
        problem = broadcast_problem(shapes, self.outer)
        hint = " (outer: true allows it)" if problem and "none of them" in problem else ""
        return f"cannot {self.verb} inputs that {problem}{hint}:" if problem else None

    def batch_problem(self, shapes: Sequence[Sequence[int]], batched: Sequence[bool]) -> BatchProblem | None:
        """Each input with a batch dimension keeps it first in the result."""
        return broadcast_batch_problem(shapes, batched)

    def extra_repr(self) -> str:
        return ", ".join([*([f"scalar={self.scalar}"] if self.scalar is not None else []),
                          *(["outer=True"] if self.outer else [])])


class _Binary(_Elementwise):
    """An element-wise operation of two inputs (or one and ``scalar``)."""

    n_inputs = 2

    def forward(self, a: Tensor, b: Tensor | None = None) -> Tensor:  # two at most: the builder counts them
        return type(self).combine(a, self.scalar if self.scalar is not None else b)


@BLOCKS.register("add")
@counts_from_children
class Add(_Elementwise):
    """Element-wise sum of its inputs, of one shape unless `broadcast` (a residual sum; a bias); or input + `scalar`."""

    verb = "add"

    def __init__(self, broadcast: bool = False, scalar: float | None = None, outer: bool = False) -> None:
        super().__init__(scalar, outer)
        self.broadcast = broadcast

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """All inputs of one shape (a residual sum of mismatched maps is a wiring mistake) unless told."""
        if self.broadcast or self.outer or self.scalar is not None:
            return super().check_shapes(shapes)
        if all(list(s) == list(shapes[0]) for s in shapes):
            return None
        return "cannot add inputs of shapes" if broadcast_problem(shapes) else \
            "cannot add inputs of different shapes (broadcast: true adds them as torch broadcasts)"

    def extra_repr(self) -> str:
        return ", ".join(filter(None, ["broadcast=True" if self.broadcast else "", super().extra_repr()]))


@BLOCKS.register("mul")
@counts_from_children
class Mul(_Elementwise):
    """Element-wise product of its inputs, broadcasting (a gate times a map, a layer scale); or input * `scalar`."""

    verb, combine = "multiply", operator.mul


@BLOCKS.register("sub")
@counts_from_children
class Sub(_Binary):
    """The first input minus the second, broadcasting; or the input minus `scalar`."""

    verb, combine = "subtract", operator.sub


@BLOCKS.register("div")
@counts_from_children
class Div(_Binary):
    """The first input divided by the second, broadcasting; or the input divided by `scalar`."""

    verb, combine = "divide", operator.truediv


@BLOCKS.register("neg")
@counts_from_children
class Neg(nn.Module):
    """Minus the input."""

    def __init__(self) -> None:  # of its own, so that an argument it does not take is named as such
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return -x


COMPARISONS: dict[str, Callable[[Any, Any], Tensor]] = {
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


@BLOCKS.register("compare")
@counts_from_children
class Compare(_Binary):
    """True where the first input `op` (eq ne lt le gt ge) the second, or `scalar`: a boolean mask."""

    verb = "compare"

    def __init__(self, op: str, scalar: float | None = None, outer: bool = False) -> None:
        super().__init__(scalar, outer)
        if op not in COMPARISONS:
            raise ConfigError("op", f"unknown comparison {op!r}", allowed=list(COMPARISONS),
                              suggestions=closest_names(op, COMPARISONS))
        self.op = op

    def forward(self, a: Tensor, b: Tensor | None = None) -> Tensor:
        return COMPARISONS[self.op](a, self.scalar if self.scalar is not None else b)

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [f"op={self.op}", super().extra_repr()]))


@BLOCKS.register("masked_fill")
@counts_from_children
class MaskedFill(nn.Module):
    """The first input with `value` wherever the second (a boolean mask, broadcasting) is true."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = _scalar(value)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return x.masked_fill(mask, self.value)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """A mask that broadcasts to the first input's shape."""
        if len(shapes) != 2:
            return f"takes 2 inputs (a tensor and a mask), got {len(shapes)}:"
        problem = broadcast_problem(shapes)
        if problem or broadcast_shape(shapes) != list(shapes[0]):
            return "takes a mask that broadcasts to the first input's shape; got"
        return None

    def extra_repr(self) -> str:
        return f"value={self.value}"


@BLOCKS.register("matmul")
class MatMul(nn.Module):
    """Matrix product of two inputs over their last two dimensions (``torch.matmul``, batch dims broadcast).

    ``transpose_b`` multiplies by the second input's transpose (attention scores: ``q @ k^T``);
    ``scaled`` scales by one over the square root of the shared dimension, as scaled dot-product
    attention does: the product, or with ``scale_first`` the first input before the product
    (``q * d ** -0.5 @ k^T``, as torchvision's Swin computes it; the same up to rounding).
    """

    def __init__(self, transpose_b: bool = False, scaled: bool = False, scale_first: bool = False) -> None:
        super().__init__()
        if scale_first and not scaled:
            raise ConfigError("scale_first", "scale_first says where to scale, but scaled is false",
                              hint="write scaled: true with it, or leave scale_first out")
        self.transpose_b, self.scaled, self.scale_first = transpose_b, scaled, scale_first

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        if self.scale_first:
            a = a * a.shape[-1] ** -0.5
        out = a @ (b.transpose(-2, -1) if self.transpose_b else b)
        return out * (1.0 / math.sqrt(a.shape[-1])) if self.scaled and not self.scale_first else out

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

    def batch_problem(self, shapes: Sequence[Sequence[int]], batched: Sequence[bool]) -> BatchProblem | None:
        """A batch dimension stays a batch dimension of the product (never one of the multiplied matrices'),
        first: a [B, D] first input times a weight [D, K] is fine, a [B, D] second input is not."""
        if len(shapes) != 2:
            return None
        (a, b), most = shapes, max(len(s) for s in shapes)
        allowed = "a batch dimension among the leading (broadcast) ones of both inputs, or a first input [B, D] " \
                  "times an input without one [D, K]"
        if batched[1] and len(b) == 2:
            return BatchProblem(None, "its second input's batch dimension would be a dimension of the matrices "
                                "multiplied (the product sums over the samples)", allowed)
        if batched[0] and len(a) == 2 and (batched[1] or len(b) != 2):
            return BatchProblem(None, "its first input's batch dimension would be a row of the matrices multiplied, "
                                "not stay first in the product", allowed)
        return broadcast_batch_problem(shapes, batched) if most > 2 else None

    def own_macs(self, inputs: tuple[Any, ...], output: Tensor) -> int:
        """One multiply-accumulate per output element and shared index (torch's bmm count / 2)."""
        return output.numel() * inputs[0].shape[-1]

    def extra_repr(self) -> str:
        return (f"transpose_b={self.transpose_b}, scaled={self.scaled}"
                + (", scale_first=True" if self.scale_first else ""))
