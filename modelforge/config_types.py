"""The one type check of a config value: does it fit an annotation; if not, one error at its key path.

Every check of a value's type calls :func:`check_type` with an annotation it derives: a schema's field, a
factory's default (:func:`implied_type`), a parameter's annotation, a ``pl.Trainer`` argument's. OmegaConf's
own refusals are worded with :func:`type_name`, so a type reads the same wherever it was checked.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

from modelforge.errors import ConfigError, closest_names


def type_name(tp: Any) -> str:
    """An annotation in the words errors use: ``int or null``, ``list of str``, ``'max' | 'avg'``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else type_name(a) for a in args)
    if origin is tuple:
        return f"list of {type_name(args[0])}" if len(args) == 2 and args[1] is Ellipsis else f"list of {len(args)}"
    if origin in (list, Sequence):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin in (dict, Mapping) or tp in (dict, Mapping) or dataclasses.is_dataclass(tp):
        return "mapping"
    return "any value" if tp is Any else getattr(tp, "__name__", str(tp))


@functools.lru_cache(maxsize=256)  # a graph checks every node against the same few annotations
def _origin_and_args(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    return typing.get_origin(tp), typing.get_args(tp)


def fits(value: Any, tp: Any, path: str) -> bool:
    """True when ``value`` fits ``tp``; list elements that do not fit raise with their index."""
    try:
        origin, args = _origin_and_args(tp)
    except TypeError:  # an unhashable annotation
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or isinstance(tp, typing.TypeVar):
        return True
    if origin in (Union, types.UnionType):
        return any(fits(value, arm, path) for arm in args)
    if origin is Literal:
        return value in args
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):  # a fixed length, as (0.9, 0.999) implies
        return isinstance(value, (list, tuple)) and len(value) == len(args)
    if origin in (list, Sequence, tuple):
        if isinstance(value, (list, tuple)) and args:
            for i, item in enumerate(value):
                check_type(item, args[0], f"{path}[{i}]")
        return isinstance(value, (list, tuple))
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        return isinstance(value, Mapping)
    if tp in (int, float):  # a YAML int is a fine float; a bool is neither
        return isinstance(value, (int, tp)) and not isinstance(value, bool)
    return isinstance(value, origin or tp)


def check_type(value: Any, tp: Any, path: str, *, written: Any = None, hint: str | None = None) -> None:
    """Raise a ConfigError at ``path`` when ``value`` does not fit the annotation ``tp``.

    ``written``: the value as the config wrote it, when an expression computed ``value`` from it.
    """
    if fits(value, tp, path):
        return
    arms = (tp, *typing.get_args(tp))
    choices = [str(a) for arm in arms if typing.get_origin(arm) is Literal for a in typing.get_args(arm)]
    shown = f"{type(value).__name__} {value!r}"
    if isinstance(written, str) and written != value:
        shown += f" (the expression {written!r})"
    raise ConfigError(path, f"expected {type_name(tp)}, got {shown}", allowed=type_name(tp),
                      suggestions=closest_names(str(value), choices) if choices else (), hint=hint)


def implied_type(default: Any) -> Any:
    """The annotation a factory's default implies of its option, where the factory's own annotations are too
    loose or too exotic to check (torch's, Lightning's): a flag, a string, a number, a list of that length."""
    if isinstance(default, (bool, str)):
        return type(default)
    if isinstance(default, int):
        return int | float
    if isinstance(default, float):
        return float
    return tuple[(Any,) * len(default)] if isinstance(default, (tuple, list)) and default else Any
