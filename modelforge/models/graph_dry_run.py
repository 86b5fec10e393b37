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
from torch.utils._pytree import tree_map

from modelforge.models.param_cap import ParamBudget
from modelforge.models.shapes import shown_shape


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
        """``factory(**kwargs)`` with the init rules applied."""
        block = factory(**kwargs)
        if self.init is not None and isinstance(block, nn.Module):
            block.apply(self.init)
        return block

    @staticmethod
    def run(block: nn.Module, inputs: list[Any], kwargs: Mapping[str, Any]) -> Any:
        """``block``'s output in eval mode (without gradients: the builder runs under ``torch.no_grad``); on the
        empty batch, or where that fails, on two zeros (whose error, if any, is raised)."""
        block.eval()
        try:
            return block(*inputs, **kwargs)
        except Exception:  # noqa: BLE001  (run again on a real batch: its error, or its output)
            return block(*tree_map(_two_zeros, inputs), **kwargs)
        finally:
            block.train()


def _two_zeros(value: Any) -> Any:
    """A batch of two zeros for a tensor of an empty batch (other tensors and values as they are)."""
    if isinstance(value, Tensor) and value.numel() == 0 and value.dim():
        return torch.zeros(shown_shape(value), dtype=value.dtype)
    return value
