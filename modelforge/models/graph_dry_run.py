"""Shapes without arithmetic: each block of a graph is made once, and run on an empty batch.

The graph builder makes each node's block for real (its init rules applied as soon as it is made, so a
block's weights depend only on the blocks before it) and runs it on tensors of the shapes a batch with no
sample in it has (``[0, C, H, W]``): torch checks every shape and computes the output's, but does no
arithmetic, so building costs the same at 512x512 as at 28x28 and no activation is allocated. Messages show
that batch as 2 (:func:`modelforge.models.shapes.describe_dry`). A block that fails on the empty batch is run
again on a batch of two zeros, as the builder always did: its error is the one torch gives a real batch (and
a block that refuses an empty batch still builds).

Before a block is made its size is checked against the model's ``max_params``
(:class:`modelforge.models.param_cap.ParamBudget`), so a width with a few zeros too many is refused before
anything is allocated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.layers.init_once import DeferredFills
from modelforge.models.param_cap import ParamBudget, size_guess
from modelforge.models.shapes import shown_shape

# A block whose largest weight may hold this many values or more is made with torch's default fills deferred
# (the break-even of watching its construction, measured on mobilenet_v3_small and densenet121).
DEFER_FROM = 8192


def empty_batch(*shape: int) -> Tensor:
    """The model's input for the dry run: no sample, of the shape ``shape`` (without the batch)."""
    return torch.zeros(0, *shape)


class DryRun:
    """Makes blocks (size checked, init rules applied) and runs them on an empty batch; used under
    ``torch.no_grad()`` (init fills weights in place)."""

    def __init__(self, init: Callable[[nn.Module], None] | None = None, budget: ParamBudget | None = None) -> None:
        self.init, self.budget = init, budget

    def check_size(self, factory: Callable[..., nn.Module], kwargs: dict[str, Any], where: str) -> None:
        """Refuse a block that would hold more than the model's ``max_params`` (``where``: its node's path)."""
        if self.budget is not None:
            self.budget.check_before(factory, kwargs, where)

    def make(self, factory: Callable[..., nn.Module], kwargs: dict[str, Any]) -> nn.Module:
        """``factory(**kwargs)`` with the init rules applied. In a block whose largest weight holds about
        ``DEFER_FROM`` values or more (:func:`~modelforge.models.param_cap.size_guess`), torch's default fill of a
        weight that a rule fills again is never drawn (:class:`~modelforge.layers.init_once.DeferredFills`: for
        smaller blocks, watching their construction costs more than the draws it saves)."""
        if self.init is None:
            return factory(**kwargs)
        if size_guess(kwargs) < DEFER_FROM:
            block = factory(**kwargs)
        else:
            with DeferredFills():
                block = factory(**kwargs)
                if isinstance(block, nn.Module):
                    block.apply(self.init)
                return block
        if isinstance(block, nn.Module):
            block.apply(self.init)
        return block

    @staticmethod
    def run(block: nn.Module, inputs: list[Any], kwargs: Mapping[str, Any]) -> Any:
        """``block``'s output in eval mode (without gradients: the builder runs under ``torch.no_grad``); on the
        empty batch, or where that fails, on two zeros (whose error, if any, is raised)."""
        if not kwargs and len(inputs) == 1 and (out := output_by_rule(block, inputs[0])) is not None:
            return out
        block.eval()
        try:
            return block(*inputs, **kwargs)
        except Exception:  # noqa: BLE001  (run again on a real batch: its error, or its output)
            return block(*_two_zeros(inputs), **kwargs)
        finally:
            block.train()


def _two_zeros(value: Any) -> Any:
    """A batch of two zeros for each tensor of an empty batch in ``value`` (tuples and lists of them, nested)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_two_zeros(v) for v in value)
    if isinstance(value, Tensor) and value.numel() == 0 and value.dim():
        return torch.zeros(shown_shape(value), dtype=value.dtype)
    return value


# The layers most graphs are made of, whose output shapes torch defines by formula: computed here when the input
# fits (any other case runs the layer, whose error names what does not fit). torch's CPU kernels set up each new
# convolution and batch norm (oneDNN primitives) even for an empty batch: a few hundred microseconds a layer.
_CONVS = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}
_NORMS = {nn.BatchNorm1d: (2, 3), nn.BatchNorm2d: (4,), nn.BatchNorm3d: (5,)}
_SAME_SHAPE = (nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Hardswish, nn.Hardsigmoid, nn.Sigmoid, nn.Tanh, nn.Identity,
               nn.Dropout, nn.Dropout2d)


def output_by_rule(block: nn.Module, x: Any) -> Tensor | None:
    """The output of a plain convolution, batch norm, linear layer or element-wise activation on ``x``, by
    torch's formula (None: no rule, or ``x`` does not fit: the layer is run)."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.numel() or not x.dim():
        return None
    kind = type(block)
    if kind in _SAME_SHAPE:
        return x.new_empty(x.shape)
    if kind in _NORMS:
        fits = x.dim() in _NORMS[kind] and x.shape[1] == block.num_features
        return x.new_empty(x.shape) if fits else None
    if kind is nn.Linear:
        return x.new_empty((*x.shape[:-1], block.out_features)) if x.shape[-1] == block.in_features else None
    if kind in _CONVS:
        return _conv_output(block, x, _CONVS[kind])
    return None


def _conv_output(conv: Any, x: Tensor, dims: int) -> Tensor | None:
    if (x.dim() != dims + 2 or x.shape[1] != conv.in_channels or conv.padding_mode != "zeros"
            or not isinstance(conv.padding, tuple)):
        return None
    sizes = [(size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1 for size, pad, dilation, kernel, stride in
             zip(x.shape[2:], conv.padding, conv.dilation, conv.kernel_size, conv.stride)]
    return x.new_empty((x.shape[0], conv.out_channels, *sizes)) if min(sizes) > 0 else None
