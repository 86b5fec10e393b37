"""A composite built for its input's size runs at any size: rebuilt there, with the same weights.

A composite whose nodes read ``input_shape`` (Swin's window attention: the padding, the windows per row,
the shift and its mask) is made for the map it saw when the model was built. Given a map of another size
it is built again at that size, as torchvision's Swin computes its windows from each input, and the new
graph takes the built one's modules wherever they hold weights (the same ``nn.Linear`` objects, so the
``state_dict``, an optimizer and hooks on them see one set); only the modules without weights (reshapes,
rolls, constants such as the mask) are new. One rebuilt graph is kept per size; a weight whose shape
depends on the size (nothing the shipped blocks have) cannot be shared, and that size is refused in one
line naming the node and the size it was built for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.errors import ConfigError
from modelforge.layers.expressions import names_in

INPUT_SHAPES = frozenset({"input_shape", "input_shapes"})  # the first input's shape; every input's


def reads_input_shape(composite: Any) -> bool:
    """Whether a composite's nodes or parameter defaults read ``input_shape(s)`` (its modules fit one size)."""
    config = composite.config
    if any(INPUT_SHAPES & names_in(default) for default in config.params.values()):
        return True
    return any(INPUT_SHAPES & names_in([node.args, node.when, node.repeat, node.kwargs])
               for node in composite.table.nodes.values())


def _sizes(inputs: Sequence[Any], batched: Sequence[bool]) -> tuple[Any, ...]:
    """Each input's shape without the batch (a tensor without one: its whole shape)."""
    return tuple(tuple(x.shape[1:] if b else x.shape) if isinstance(x, Tensor) else None
                 for x, b in zip(inputs, batched))


class SizedFor:
    """The input sizes a composite's graph was built for, and its graphs rebuilt for others."""

    def __init__(self, inputs: Sequence[Any], batched: Sequence[bool], rebuild: Callable[[list[Any]], nn.Module],
                 path: str) -> None:
        self.batched = tuple(batched)
        self.built = _sizes(inputs, batched)
        self.rebuild, self.path = rebuild, path
        self.variants: dict[tuple[Any, ...], nn.Module] = {}

    def fits(self, inputs: Sequence[Any]) -> bool:
        return _sizes(inputs, self.batched) == self.built

    def at_size(self, graph: nn.Module, inputs: Sequence[Any]) -> nn.Module:
        """``graph`` rebuilt for these inputs' sizes, sharing its weighted modules; kept for the next call."""
        sizes = _sizes(inputs, self.batched)
        variant = self.variants.get(sizes)
        if variant is None:
            dry = [torch.zeros(0, *x.shape[1:], dtype=x.dtype) if b and isinstance(x, Tensor) else
                   torch.zeros(x.shape, dtype=x.dtype) if isinstance(x, Tensor) else x
                   for x, b in zip(inputs, self.batched)]
            try:
                with torch.no_grad():
                    variant = self.rebuild(dry)
            except ConfigError as exc:
                raise self._refuse(sizes)(exc.problem) from None
            _share(graph, variant, self._refuse(sizes))
            self.variants[sizes] = variant
        variant.train(graph.training)
        return variant

    def _refuse(self, sizes: tuple[Any, ...]) -> Callable[[str], ConfigError]:
        built = ", ".join(str(list(s)) for s in self.built)
        given = ", ".join(str(list(s)) for s in sizes)
        return lambda why: ConfigError(self.path, f"built for input {built} (without the batch), it cannot run "
                                                  f"at {given}: {why}",
                                       hint="build the model at the size it will see (input_size)")


def _share(built: nn.Module, variant: nn.Module, refuse: Callable[[str], ConfigError], where: str = "") -> None:
    """Put ``built``'s modules that hold weights into ``variant`` in place of its own (the same objects);
    the rest of ``variant`` (constants, reshapes) moves to the device and dtypes of its counterpart."""
    for name, mine in list(variant.named_children()):
        theirs = built._modules.get(name)
        path = f"{where}.{name}" if where else name
        if theirs is None or type(theirs) is not type(mine):
            if next(mine.parameters(), None) is not None:  # weights the built model has not got: untrained
                raise refuse(f"node {path!r} has weights only at this size")
            mine.to(device=_device(built))
            continue
        own = dict(mine.named_parameters(recurse=False))
        if own:
            shapes = {n: tuple(p.shape) for n, p in own.items()}
            if shapes != {n: tuple(p.shape) for n, p in theirs.named_parameters(recurse=False)}:
                raise refuse(f"node {path!r} has weights of another shape at this size")
            variant._modules[name] = theirs
            continue
        for buffer_name, buffer in list(mine.named_buffers(recurse=False)):
            reference = theirs._buffers.get(buffer_name)
            if reference is not None:
                mine._buffers[buffer_name] = buffer.to(device=reference.device, dtype=reference.dtype)
        _share(theirs, mine, refuse, path)


def _device(module: nn.Module) -> torch.device:
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")
