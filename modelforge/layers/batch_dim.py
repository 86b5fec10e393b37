"""The batch dimension is not an op's to touch: which arguments of which blocks would, for an input that has one.

A graph's input, and every tensor computed from it, has the batch dimension first. An op that
reduces, normalizes, reorders, splits, rolls or pads along it (``mean`` over dim 0, a ``permute``
that moves 0, ``softmax`` over dim 0, ``flatten`` from dim 0) mixes the samples of a batch: the
model then builds, and fails much later (a loss of 8 samples for a batch of 2) or trains silently
on nonsense. The graph builder asks :func:`batch_dim_problem` of each block whose input has a
batch dimension and refuses the node, naming the argument. Tensors that come from no input
(a ``parameter``, a ``constant``) have no batch dimension, and ops over them may use every one.

A block of ours says which of its attributes name dimensions of its (first) input with the class
attribute ``dim_args``, or answers itself with ``batch_problem(shapes, batched)`` (the shapes of its
inputs and which of them have a batch dimension: ``matmul`` and the element-wise ops, whose inputs
must keep it first in the result); torch.nn modules with a ``dim`` are listed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from torch import nn

from modelforge.errors import ConfigError

# torch.nn modules whose attributes name a dimension of their input (a dimension 0 there is the batch's).
_TORCH_DIM_ARGS: dict[type, tuple[str, ...]] = {
    nn.Softmax: ("dim",), nn.LogSoftmax: ("dim",), nn.Softmin: ("dim",), nn.GLU: ("dim",),
    nn.Flatten: ("start_dim",), nn.Unflatten: ("dim",), nn.CosineSimilarity: ("dim",),
}
_IMPLICIT_SOFTMAX = (nn.Softmax, nn.LogSoftmax, nn.Softmin)


class BatchProblem(NamedTuple):
    """Why a block would touch the batch dimension: the argument (None: its inputs, as wired), the problem
    in words, what is allowed."""

    arg: str | None
    problem: str
    allowed: str


def is_batch_dim(dim: int, ndim: int) -> bool:
    """``dim`` (negative: from the end) names dimension 0 of a tensor of ``ndim`` dimensions."""
    return ndim > 0 and -ndim <= dim < ndim and dim % ndim == 0


def allowed_dims(ndim: int) -> str:
    """What a dimension argument may be for an input of ``ndim`` dimensions, the batch's first."""
    if ndim < 2:
        return "none: the input has only the batch dimension"
    return f"1 to {ndim - 1}, or -1 to -{ndim - 1} from the end (0 and -{ndim} are the batch dimension)"


def dims_problem(module: nn.Module, args: Sequence[str], ndim: int) -> BatchProblem | None:
    """The first of ``args`` (attributes of ``module``: a dimension or a list of them) that names the batch's."""
    for arg in args:
        value = getattr(module, arg, None)
        dims = value if isinstance(value, (list, tuple)) else [value]
        for dim in dims:
            if isinstance(dim, int) and not isinstance(dim, bool) and is_batch_dim(dim, ndim):
                return BatchProblem(arg, f"{arg}={value!r} is the batch dimension of its input",
                                    allowed_dims(ndim))
    return None


def broadcast_batch_problem(shapes: Sequence[Sequence[int]], batched: Sequence[bool]) -> BatchProblem | None:
    """Inputs combined element-wise: each with a batch dimension keeps it first in the result (an input of
    fewer dimensions than the others would have its batch broadcast along another one)."""
    most = max((len(s) for s in shapes), default=0)
    for i, (shape, has) in enumerate(zip(shapes, batched)):
        if has and len(shape) < most:
            return BatchProblem(None, f"its input {i} has the batch dimension first but {len(shape)} dimensions, "
                                f"and the result {most}: its batch would broadcast along dimension {most - len(shape)},"
                                " not stay first", "inputs whose batch dimension stays first: as many dimensions "
                                "as the result (a parameter or constant may have fewer)")
    return None


def batch_dim_problem(module: nn.Module, shapes: Sequence[Sequence[int]],
                      batched: Sequence[bool]) -> BatchProblem | None:
    """Why ``module`` would touch the batch dimension of its inputs (of ``shapes``; ``batched``: which have one,
    first); None: it does not."""
    if hasattr(type(module), "batch_problem"):  # a method (looked up on the class: a miss on a module is slow)
        return module.batch_problem(shapes, batched)
    if not shapes or not batched[0]:
        return None
    ndim = len(shapes[0])
    args = getattr(type(module), "dim_args", None) or _TORCH_DIM_ARGS.get(type(module))
    if isinstance(module, _IMPLICIT_SOFTMAX) and module.dim is None and ndim in (1, 3):
        return BatchProblem("dim", f"no dim: torch then takes dim 0 of a {ndim}-dimensional input, the batch "
                            "dimension of its input", allowed_dims(ndim) + "; write the dim (-1: the last)")
    return dims_problem(module, args, ndim) if args else None


def check_batch_dim(module: nn.Module, shapes: Sequence[Sequence[int]], batched: Sequence[bool], path: str,
                    what: str, described: str) -> None:
    """Refuse ``module`` (``what``: ``node 'x' (permute)``; ``path``: the node's) if it would touch the batch
    dimension of its inputs (of ``shapes``; ``batched``: which have one; ``described``: their labels and shapes)."""
    problem = batch_dim_problem(module, [list(s) for s in shapes], list(batched))
    if problem is not None:
        where = f"{path}.args.{problem.arg}" if problem.arg else f"{path}.inputs"
        raise ConfigError(where, f"{what}: {problem.problem}: {described}", allowed=problem.allowed,
                          hint="dimension 0 holds the samples of a batch; an op over it mixes them")


_TRANSFORMERS = (nn.Transformer, nn.TransformerEncoder, nn.TransformerDecoder, nn.TransformerEncoderLayer,
                 nn.TransformerDecoderLayer)


def output_has_batch_first(module: nn.Module, index: Sequence[int]) -> bool:
    """Whether part ``index`` of ``module``'s output (``()``: all of it) has the batch dimension first, its input
    having it first: not the states of an RNN ([layers, B, H]) nor what a module with ``batch_first=False`` gives."""
    if vars(module).get("keep_all") and index:  # a repeated node read copy by copy (node.i)
        return output_has_batch_first(module[index[0]], index[1:])
    if isinstance(module, nn.RNNBase):
        return bool(index) and index[0] == 0 and module.batch_first
    if isinstance(module, nn.MultiheadAttention):
        return module.batch_first or bool(index) and index[0] == 1  # the attention weights are [B, L, S]
    if isinstance(module, _TRANSFORMERS):
        return next((m.batch_first for m in module.modules() if isinstance(m, nn.MultiheadAttention)), True)
    return True
