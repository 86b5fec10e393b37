"""Call a registered factory with config-given keyword arguments, checked first.

Names are checked against the factory's signature (:func:`check_kwargs`), and values, once any
expression in them is evaluated, against the types it takes (:func:`check_arg_types`): a whole
number where it wants one, and a boolean (true or false, never the string "false", which Python
would take as true) where it wants one. The annotations come from the signature
(:func:`arg_types`); the check is :func:`modelforge.config_types.check_type`.
"""

from __future__ import annotations

import functools
import inspect
import operator
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union

from torch import nn

from modelforge.config_types import check_type
from modelforge.errors import ConfigError, UnknownKeyError


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
            raise UnknownKeyError(f"{path}.{key}" if path else key, key, f"{what} takes no option {key!r}", allowed)


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


def _arms(annotation: Any) -> set[Any]:
    """The types an annotation admits; a postponed one (``"int | None"``) by the names of its parts."""
    if isinstance(annotation, str):
        names = {"int": int, "bool": bool, "None": type(None), "float": float, "str": str, "Any": Any}
        return {names.get(part.strip(), part.strip()) for part in annotation.split("|")}
    return set(typing.get_args(annotation)) if typing.get_origin(annotation) in (Union, types.UnionType) else {annotation}


def _derived(annotation: Any, default: Any, name: str) -> Any:
    """The annotation checked of one argument, or None when its values are left to the factory: a whole
    number (by annotation, or by a torch.nn width's name) or a boolean (by annotation, or by a bool default
    when unannotated, as torch.nn's flags are; None is theirs too). A default of None admits None."""
    if annotation is inspect.Parameter.empty:
        if isinstance(default, bool):
            return bool | None
        return int | None if name in _WHOLE_NUMBER_NAMES else None
    arms = _arms(annotation)
    optional = type(None) in arms or default is None
    if bool in arms and arms <= {bool, type(None)}:
        return bool | None if optional else bool
    if int in arms and not arms & {float, str, Any}:  # Conv2d's padding takes "same": not checked
        # Its other arms (kernel_size's tuple) as annotated, when they resolved to types; else any value.
        rest = [arm for arm in arms - {int, type(None)} if not isinstance(arm, str)]
        if len(rest) < len(arms - {int, type(None)}):
            return None if name not in _WHOLE_NUMBER_NAMES else int | None
        return functools.reduce(operator.or_, [int, *rest, *([type(None)] if optional else [])])
    return int | None if name in _WHOLE_NUMBER_NAMES else None


@functools.lru_cache(maxsize=1024)
def arg_types(factory: Callable) -> dict[str, Any]:
    """The annotations of ``factory``'s arguments that a config's values are checked against: those that take
    a whole number or a boolean (a float or the string "false" would be taken by torch and mean something else)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return dict.fromkeys(_WHOLE_NUMBER_NAMES, int | None)
    try:
        hints = typing.get_type_hints(factory.__init__ if isinstance(factory, type) else factory)
    except Exception:  # names only a type checker imports: the written annotation's parts are read instead
        hints = {}
    found = {p.name: _derived(hints.get(p.name, p.annotation), p.default, p.name) for p in params}
    return {name: tp for name, tp in found.items() if tp is not None}


def check_arg_types(factory: Callable, args: Mapping[str, Any], path: str,
                    written: Mapping[str, Any] | None = None) -> None:
    """A whole number or a boolean that an expression (or the YAML) made something else, named before torch
    takes it (``bool("false")`` is true). ``path``: of the arguments; ``written``: the values as written."""
    written = args if written is None else written
    for key, tp in arg_types(factory).items():
        if key not in args:
            continue
        value = args[key]
        if isinstance(value, str) and bool not in _arms(tp):
            hint = (f"{key} takes a whole number: a word that names no parameter stays a word "
                    "(is a parameter's name misspelt?)")
        elif isinstance(value, float):
            hint = f"{key} takes a whole number: compute it with // and whole numbers (c * 3 // 2 rather than c * 1.5)"
        else:
            hint = "write true or false without quotes" if isinstance(value, str) else None
        check_type(value, tp, f"{path}.{key}", written=written.get(key), hint=hint)
