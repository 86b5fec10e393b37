"""Shapes without arithmetic: a graph's blocks are first made and run on torch's meta device, then made for real.

The graph builder makes each block under ``torch.device("meta")`` (parameters and buffers with a shape but
no storage) and runs it on meta tensors shaped as a batch of two, so widths and every shape check come
from shapes alone: building costs the same at 512x512 as at 28x28, and no activation is ever allocated.
Once the whole graph is known (and its size checked, :mod:`modelforge.models.param_cap`), :func:`materialize`
calls every block's factory again on the default device, with the same arguments and in the order the blocks
were first made, and gives each its init rule as it is made.

What a block cannot do on meta (an operation torch has no meta kernel for, a value read in ``__init__`` or
``forward``), and every error, is done again for real on zeros of the same shapes, with the random state
put back afterwards: a block that needs it costs a real forward, and the message of an error is always the
one torch gives on real tensors (meta kernels word their checks differently).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_map

META = torch.device("meta")


@dataclass(frozen=True)
class Recipe:
    """How a block was made: its factory and the arguments it was called with."""

    factory: Callable[..., nn.Module]
    kwargs: Mapping[str, Any]

    def make(self) -> nn.Module:
        return self.factory(**self.kwargs)


class MetaBlocks:
    """Makes blocks on the meta device, remembers how, and runs them on meta tensors."""

    def __init__(self) -> None:
        self.recipes: dict[int, Recipe] = {}  # id of a block in the graph -> how to make it for real

    def make(self, factory: Callable[..., nn.Module], kwargs: Mapping[str, Any]) -> nn.Module:
        """The block on the meta device (for real, without drawing from the random state, where meta cannot
        make it); a factory's own error is raised as it is on the real device."""
        recipe = Recipe(factory, dict(kwargs))
        try:
            with META:
                block = recipe.make()
        except Exception:  # noqa: BLE001  (whatever failed on meta is done again for real: its error, or success)
            block = _made_for_real(recipe)
        self.recipes[id(block)] = recipe
        return block

    def run(self, block: nn.Module, inputs: list[Any], kwargs: Mapping[str, Any]) -> Any:
        """``block``'s output on ``inputs`` (meta tensors), in eval mode without gradients: meta tensors again."""
        try:
            with torch.no_grad(), META:
                return block.eval()(*inputs, **kwargs)
        except Exception:  # noqa: BLE001
            return self._run_for_real(block, inputs, kwargs)
        finally:
            block.train()

    def _run_for_real(self, block: nn.Module, inputs: list[Any], kwargs: Mapping[str, Any]) -> Any:
        """The block made for real and run on zeros of the inputs' shapes; its output as meta tensors
        (or the error torch raises on real tensors)."""
        real = block if _is_real(block) else _made_for_real(self.recipes[id(block)])
        zeros = tree_map(lambda x: torch.zeros(x.shape, dtype=x.dtype) if isinstance(x, Tensor) else x, inputs)
        with torch.no_grad():
            out = real.eval()(*zeros, **kwargs)
        return tree_map(lambda x: x.to(META) if isinstance(x, Tensor) else x, out)


def _is_real(block: nn.Module) -> bool:
    return not any(t.is_meta for t in [*block.parameters(), *block.buffers()])


def _made_for_real(recipe: Recipe) -> nn.Module:
    """The block made on the default device, leaving the random state as it was (it is made again later)."""
    with torch.random.fork_rng(devices=[]):
        return recipe.make()


def materialize(container: nn.Module, recipes: Mapping[int, Recipe],
                init: Callable[[nn.Module], None] | None = None) -> None:
    """Replace every block made by :class:`MetaBlocks` inside ``container`` (graphs and repeats, nested) by the
    block made for real, depth first in registration order: the order the blocks were first made. ``init``
    (for ``module.apply``) fills each block's weights as soon as it is made, so a block's weights depend only
    on the blocks before it: a model without its head holds the weights the whole model holds."""
    for key, child in list(container._modules.items()):
        recipe = recipes.get(id(child))
        if recipe is not None:
            block = container._modules[key] = recipe.make()
            if init is not None:
                with torch.no_grad():
                    block.apply(init)
        elif child is not None:
            materialize(child, recipes, init)
