"""Choosing the modules a plugin applies to: exact names, globs, or module type names.

A pattern is matched with ``fnmatch`` against each submodule's dotted name from
``named_modules()`` and against its type name (``type(m).__name__``), so
``encoder.0``, ``encoder.*`` and ``Conv2d`` all work. The model itself (name
``""``) is never matched by a pattern: its output is the model's output.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import NamedTuple

from torch import nn

from modelforge.errors import ConfigError, closest_names

MAX_LISTED = 40  # names shown in an error; a big model's full list would bury the message
DEFAULTS = ("leaves", "children", "with_params", "model")


class Target(NamedTuple):
    """A module a plugin hooks, with its dotted name in the model (``""`` for the model itself)."""

    name: str
    module: nn.Module


def _has_params(module: nn.Module, recurse: bool = True) -> bool:
    return any(p.requires_grad for p in module.parameters(recurse=recurse))


def default_targets(model: nn.Module, default: str) -> list[Target]:
    """The modules a plugin applies to when its ``layers`` is null.

    ``leaves``: modules without children; ``children``: the model's direct children;
    ``with_params``: modules that own trainable parameters directly; ``model``: the
    model itself (its input and output). A model without submodules is its own target.
    """
    if default not in DEFAULTS:
        raise ValueError(f"default must be one of {DEFAULTS}, got {default!r}")
    if default == "model":
        return [Target("", model)]
    named = list(model.named_modules())
    if default == "with_params":
        return [Target(n, m) for n, m in named if _has_params(m, recurse=False)]
    if default == "children":
        chosen = [Target(n, m) for n, m in model.named_children()]
    else:
        chosen = [Target(n, m) for n, m in named[1:] if next(m.children(), None) is None]
    return chosen or [Target("", model)]


def _matches(pattern: str, name: str, module: nn.Module) -> bool:
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(type(module).__name__, pattern)


def _listing(names: list[str], types: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    more = f" ... ({len(names) - MAX_LISTED} more)" if len(names) > MAX_LISTED else ""
    return f"module names: {shown}{more}; type names: {', '.join(types)}"


def select_targets(
    model: nn.Module,
    patterns: Sequence[str] | None,
    *,
    default: str = "leaves",
    path: str = "layers",
    needs_params: bool = False,
    indexed: bool = True,
) -> list[Target]:
    """The modules ``patterns`` choose, in ``named_modules()`` order and without duplicates.

    Raises:
        ConfigError: at ``path[i]`` when pattern ``i`` matches no module (or, with
            ``needs_params``, only modules without trainable parameters), listing
            the model's module names and suggesting the closest (at ``path`` itself when
            not ``indexed``: a single-pattern option such as ``grad_cam``'s ``layer``).
    """
    if patterns is None:
        return default_targets(model, default)
    named = [(n, m) for n, m in model.named_modules() if n]
    chosen: dict[str, nn.Module] = {}
    for i, pattern in enumerate(patterns):
        where = f"{path}[{i}]" if indexed else path
        matched = [(n, m) for n, m in named if _matches(pattern, n, m)]
        if needs_params:
            with_params = [(n, m) for n, m in matched if _has_params(m)]
            if matched and not with_params:
                raise ConfigError(
                    where,
                    f"{pattern!r} matches only modules without trainable parameters: "
                    + ", ".join(n for n, _ in matched[:MAX_LISTED]),
                    allowed=", ".join(n for n, m in named if _has_params(m, recurse=False))[:2000],
                )
            matched = with_params
        if not matched:
            names = [n for n, _ in named]
            types = sorted({type(m).__name__ for _, m in named})
            raise ConfigError(
                where,
                f"{pattern!r} matches no module of {type(model).__name__}",
                allowed=_listing(names, types),
                suggestions=closest_names(pattern, names + types),
                hint="`python -m modelforge summary` lists the names; globs like 'encoder.*' "
                     "and type names like 'Conv2d' work too",
            )
        chosen.update(matched)
    order = {n: i for i, (n, _) in enumerate(named)}
    return [Target(n, chosen[n]) for n in sorted(chosen, key=order.__getitem__)]
