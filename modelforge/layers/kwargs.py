"""Call a registered factory with config-given keyword arguments, checked first.

Names are checked against the factory's signature (:func:`check_kwargs`), and values, once any
expression in them is evaluated, against the types it takes (:func:`check_arg_types`): a whole
number where it wants one, and a boolean (true or false, never the string "false", which Python
would take as true) where it wants one.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from modelforge.errors import ConfigError, closest_names


def _named_params(func: Callable) -> tuple[list[str], bool] | None:
    """(keyword names, takes **kwargs) of ``func``, or None when it has no signature."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature
        return None
    names = [p.name for p in params
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    return names, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def accepted_kwargs(factory: Callable) -> list[str] | None:
    """Keyword names ``factory`` takes, or None when it takes ``**kwargs`` that cannot be followed.

    A class whose ``__init__`` passes ``**kwargs`` on to its base (``nn.LSTM`` to ``nn.RNNBase``)
    takes the base's names too, up to a base that names all of its own. Cached per factory:
    a graph asks once per node.
    """
    try:
        names = _accepted_kwargs(factory)
    except TypeError:  # an unhashable callable: not cached
        names = _accepted_kwargs.__wrapped__(factory)
    return None if names is None else list(names)


@functools.lru_cache(maxsize=1024)
def _accepted_kwargs(factory: Callable) -> tuple[str, ...] | None:
    if not isinstance(factory, type):
        found = _named_params(factory)
        return None if found is None or found[1] else tuple(found[0])
    names: list[str] = []
    for cls in factory.__mro__:
        if "__init__" not in vars(cls):
            continue
        if cls in (object, nn.Module):
            return None  # reached the root with **kwargs still open
        found = _named_params(cls.__init__)
        if found is None:
            return None
        names += [n for n in found[0] if n != "self" and n not in names]
        if not found[1]:
            return tuple(names)
    return None


def check_kwargs(factory: Callable, kwargs: Mapping[str, Any], path: str, what: str) -> None:
    """Raise a ConfigError for any keyword ``factory`` does not take."""
    allowed = accepted_kwargs(factory)
    if allowed is None:
        return
    for key in kwargs:
        if key not in allowed:
            raise ConfigError(
                f"{path}.{key}" if path else key,
                f"{what} takes no option {key!r}",
                allowed=allowed or "no options",
                suggestions=closest_names(key, allowed),
            )


def split_spec(spec: Any, path: str, what: str) -> tuple[Any, dict[str, Any]]:
    """Split ``"name"`` or ``{name: ..., **options}`` into (name, options)."""
    if isinstance(spec, str) or callable(spec):
        return spec, {}
    if isinstance(spec, Mapping):
        options = dict(spec)
        if "name" not in options:
            raise ConfigError(
                path,
                f"a {what} given as a mapping needs a 'name' key",
                allowed=f"a {what} name, or {{name: ..., <options>}}",
            )
        return options.pop("name"), options
    raise ConfigError(
        path,
        f"expected a {what} name or mapping, got {type(spec).__name__} {spec!r}",
        allowed=f"a {what} name, or {{name: ..., <options>}}",
    )


# Whole-number arguments of torch.nn classes whose signatures carry no annotations (MultiheadAttention, RNNs).
_WHOLE_NUMBER_NAMES = frozenset({
    "out_channels", "out_features", "hidden_size", "num_layers", "proj_size", "num_heads", "embed_dim", "kdim",
    "vdim", "d_model", "nhead", "dim_feedforward", "num_embeddings", "embedding_dim", "groups", "num_groups"})


def _is_int(annotation: Any) -> bool:
    """An annotation that admits whole numbers but no float and no string (Conv2d's padding takes "same")."""
    if isinstance(annotation, str):  # postponed annotations: "int", "int | None"
        parts = {part.strip() for part in annotation.split("|")}
        return "int" in parts and not parts & {"float", "str", "Any"}
    if annotation is int:
        return True
    args = typing.get_args(annotation)
    return int in args and float not in args and str not in args


@functools.lru_cache(maxsize=1024)
def whole_number_params(factory: Callable) -> frozenset[str]:
    """The arguments of ``factory`` that take whole numbers (by annotation, or by a torch.nn width's name)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return _WHOLE_NUMBER_NAMES
    return frozenset(p.name for p in params if _is_int(p.annotation)) | _WHOLE_NUMBER_NAMES


def _is_bool(annotation: Any, default: Any) -> tuple[bool, bool]:
    """(takes a boolean and nothing else, may also be None) by annotation, or by a bool default when unannotated."""
    if annotation is inspect.Parameter.empty:
        return isinstance(default, bool), True  # torch.nn's unannotated flags (batch_first=False): None is theirs
    if isinstance(annotation, str):  # postponed annotations: "bool", "bool | None"
        parts = {part.strip() for part in annotation.split("|")}
        return "bool" in parts and parts <= {"bool", "None"}, "None" in parts
    if annotation is bool:
        return True, False
    args = set(typing.get_args(annotation))
    return bool(args) and bool in args and args <= {bool, type(None)}, type(None) in args


@functools.lru_cache(maxsize=1024)
def bool_params(factory: Callable) -> dict[str, bool]:
    """The arguments of ``factory`` that take a boolean, each with whether it may also be None."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {}
    found = {p.name: _is_bool(p.annotation, p.default) for p in params}
    return {name: optional for name, (boolean, optional) in found.items() if boolean}


def check_arg_types(factory: Callable, args: Mapping[str, Any], path: str,
                    written: Mapping[str, Any] | None = None) -> None:
    """A whole number or a boolean that an expression (or the YAML) made something else, named before torch
    takes it (``bool("false")`` is true). ``path``: of the arguments; ``written``: the values as written."""
    written = args if written is None else written
    for key in whole_number_params(factory) & args.keys():
        value, raw = args[key], written.get(key)
        if isinstance(value, (float, str)):
            said = f"expression {raw!r} is {value!r}," if isinstance(raw, str) and raw != value else f"{value!r} is"
            how = ("compute it with // and whole numbers (c * 3 // 2 rather than c * 1.5)" if isinstance(value, float)
                   else "a word that names no parameter stays a word (is a parameter's name misspelt?)")
            raise ConfigError(f"{path}.{key}", f"{said} not a whole number", hint=f"{key} takes a whole number: {how}")
    for key, optional in bool_params(factory).items():
        value = args.get(key, False)
        if not isinstance(value, bool) and not (value is None and optional):
            raise ConfigError(f"{path}.{key}", f"expected bool, got {type(value).__name__} {value!r}",
                              allowed="true or false" + (" or null" if optional else ""),
                              hint="write true or false without quotes" if isinstance(value, str) else None)
