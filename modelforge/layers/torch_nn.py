"""Graph-node blocks by name: a registered block, or any ``torch.nn`` module class.

Allow-list, never import: ``nn.Conv2d`` and ``torch.nn.Conv2d`` are looked up
with ``getattr`` on the ``torch.nn`` namespace (and must be ``nn.Module``
subclasses); any other dotted path (``os.system``, ``torch.load``) is refused,
so a config or a checkpoint can never run code of its choosing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Sequence
from typing import Any

from torch import nn

from modelforge.errors import ConfigError, UnknownNameError, closest_names
from modelforge.layers.kwargs import accepted_kwargs
from modelforge.registry import ACTIVATIONS, BLOCKS

TORCH_NN_PREFIXES = ("torch.nn.", "nn.")

# Width arguments filled from the incoming shapes (batch first) when a node leaves them out:
# (which input, the rule, the least number of dimensions the rule needs).
WIDTH_ARGS: dict[str, tuple[int, Callable[[Sequence[int]], Any], int]] = {
    "in_channels": (0, lambda shape: shape[1], 2),
    "num_features": (0, lambda shape: shape[1], 2),  # BatchNorm*d, InstanceNorm*d
    "num_channels": (0, lambda shape: shape[1], 2),  # GroupNorm
    "in_features": (0, lambda shape: shape[-1], 1),
    "normalized_shape": (0, lambda shape: list(shape[1:]), 2),  # LayerNorm over all but the batch dim
    "input_size": (0, lambda shape: shape[-1], 2),  # RNN, LSTM, GRU (batch_first or not: the last dim)
    "embed_dim": (0, lambda shape: shape[-1], 2),  # MultiheadAttention
    "d_model": (0, lambda shape: shape[-1], 2),  # TransformerEncoderLayer, TransformerDecoderLayer
    "num_tokens": (0, lambda shape: shape[1], 3),  # position_embedding over [B, L, D]
    "in1_features": (0, lambda shape: shape[-1], 1),  # Bilinear's two inputs
    "in2_features": (1, lambda shape: shape[-1], 1),
}


@functools.cache  # read on every node a graph builds
def torch_nn_modules() -> list[str]:
    """Every ``nn.Module`` subclass in the ``torch.nn`` namespace, as ``nn.X`` (one list: do not change it)."""
    return sorted(
        f"nn.{name}" for name, obj in vars(nn).items()
        if inspect.isclass(obj) and issubclass(obj, nn.Module) and not name.startswith("_")
    )


def resolve_block(name: Any, path: str, composites: Collection[str] = ()) -> Callable[..., nn.Module]:
    """The factory a node's ``block`` names: a registered block or ``nn.X`` / ``torch.nn.X``.

    ``composites``: names of the model's composite blocks, offered in the error for an unknown name.

    Raises:
        ConfigError: at ``path`` for a dotted name outside ``torch.nn``;
            UnknownNameError (with did-you-mean) for an unknown name.
    """
    if not isinstance(name, str):
        raise ConfigError(path, f"expected a block name, got {type(name).__name__} {name!r}")
    prefix = next((p for p in TORCH_NN_PREFIXES if name.startswith(p)), None)
    if prefix is None:
        if "." in name:
            raise ConfigError(
                path,
                f"{name!r} is not a registered block nor a torch.nn module class; "
                "a config may name only those (modelforge never imports a module a config names)",
                allowed="a name from `python -m modelforge list blocks`, or nn.<Module> such as nn.Conv2d",
            )
        torch_name = _lowercase_torch_nn().get(f"nn.{name}".lower())
        if torch_name is not None and name not in BLOCKS and name not in BLOCKS.names():  # relu -> nn.ReLU
            activation = name in ACTIVATIONS.names(plugins=False)
            raise ConfigError(path, f"unknown block {name!r}", suggestions=[torch_name],
                              allowed=[*BLOCKS.names(), "nn.<any torch.nn module>"],
                              hint=f"the activation {name!r} is also {{block: activation, args: {{spec: {name}}}}}"
                                   if activation else None)
        if name not in BLOCKS and composites:
            BLOCKS.names()  # loads plugins, which may register the name
            if name not in BLOCKS:
                raise UnknownNameError("block", name, [*BLOCKS.names(), *composites], path=path)
        return BLOCKS.get(name, path=path)
    attr = name[len(prefix):]
    obj = getattr(nn, attr, None) if attr.isidentifier() else None
    if not (inspect.isclass(obj) and issubclass(obj, nn.Module)):
        choices = torch_nn_modules()
        raise ConfigError(
            path,
            f"unknown torch.nn module {name!r}",
            allowed="a torch.nn module class, e.g. nn.Conv2d, nn.BatchNorm2d, nn.LayerNorm, nn.ReLU",
            suggestions=closest_names(f"nn.{attr}", choices),
        )
    return obj


@functools.cache
def _lowercase_torch_nn() -> dict[str, str]:
    return {n.lower(): n for n in torch_nn_modules()}


def infer_widths(factory: Callable, args: dict[str, Any], shapes: Sequence[Sequence[int]]) -> dict[str, Any]:
    """``args`` with the width arguments ``factory`` takes and the node left out filled from ``shapes``
    (one per input)."""
    try:
        rules = _width_args(factory)
    except TypeError:  # an unhashable callable: not cached
        rules = _width_args.__wrapped__(factory)
    filled = dict(args)
    for key, (which, from_shape, min_dims) in rules:
        if key not in filled and which < len(shapes) and len(shapes[which]) >= min_dims:
            filled[key] = from_shape(list(shapes[which]))
    return filled


@functools.lru_cache(maxsize=1024)  # asked at every node a graph builds
def _width_args(factory: Callable) -> tuple[tuple[str, tuple[int, Callable[[Sequence[int]], Any], int]], ...]:
    accepted = accepted_kwargs(factory) or []
    return tuple((key, rule) for key, rule in WIDTH_ARGS.items() if key in accepted)
