"""Graph-node blocks by name: a registered block, or any ``torch.nn`` module class.

Allow-list, never import: ``nn.Conv2d`` and ``torch.nn.Conv2d`` are looked up
with ``getattr`` on the ``torch.nn`` namespace (and must be ``nn.Module``
subclasses); any other dotted path (``os.system``, ``torch.load``) is refused,
so a config or a checkpoint can never run code of its choosing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from modelforge.errors import ConfigError, closest_names
from modelforge.layers.kwargs import accepted_kwargs
from modelforge.registry import BLOCKS

TORCH_NN_PREFIXES = ("torch.nn.", "nn.")

# Width arguments filled from the incoming shape (batch first) when a node leaves them out.
WIDTH_ARGS: dict[str, Callable[[Sequence[int]], Any]] = {
    "in_channels": lambda shape: shape[1],
    "num_features": lambda shape: shape[1],  # BatchNorm*d, InstanceNorm*d
    "num_channels": lambda shape: shape[1],  # GroupNorm
    "in_features": lambda shape: shape[-1],
    "normalized_shape": lambda shape: list(shape[1:]),  # LayerNorm over all but the batch dim
}


def torch_nn_modules() -> list[str]:
    """Every ``nn.Module`` subclass in the ``torch.nn`` namespace, as ``nn.X``."""
    return sorted(
        f"nn.{name}" for name, obj in vars(nn).items()
        if inspect.isclass(obj) and issubclass(obj, nn.Module) and not name.startswith("_")
    )


def resolve_block(name: Any, path: str) -> Callable[..., nn.Module]:
    """The factory a node's ``block`` names: a registered block or ``nn.X`` / ``torch.nn.X``.

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
        if name not in BLOCKS.names() and f"nn.{name}" in torch_nn_modules():
            raise ConfigError(path, f"unknown block {name!r}", suggestions=[f"nn.{name}"],
                              allowed=[*BLOCKS.names(), "nn.<any torch.nn module>"])
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


def infer_widths(factory: Callable, args: dict[str, Any], shape: Sequence[int]) -> dict[str, Any]:
    """``args`` with the width arguments ``factory`` takes and the node left out filled from ``shape``."""
    accepted = accepted_kwargs(factory) or []
    filled = dict(args)
    for key, from_shape in WIDTH_ARGS.items():
        if key in accepted and key not in filled and (key == "in_features" or len(shape) > 1):
            filled[key] = from_shape(list(shape))
    return filled

