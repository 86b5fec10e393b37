"""Check config options against the signature of the class or factory they will be passed to.

The signature is the one source of the defaults and the allowed names: an unknown name gets a
did-you-mean, a required argument left out is named, and a value whose type cannot match the
default's (``optim.lr=abc``) is refused before any work starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

from modelforge.errors import ConfigError, closest_names


def signature_defaults(factory: Callable, skip: Collection[str] = ()) -> dict[str, Any]:
    """Keyword parameters of ``factory`` and their defaults (``inspect.Parameter.empty`` if required)."""
    params = inspect.signature(factory).parameters.values()
    return {p.name: p.default for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip and p.name != "self"}


def check_call(factory: Callable, options: Mapping[str, Any], path: str, what: str,
               *, skip: Collection[str] = (), filled: Collection[str] = (), verb: str = "takes") -> None:
    """Raise a ConfigError for an unknown option, a missing required one, or a value of the wrong type.

    ``skip``: parameters modelforge passes itself (not options); ``filled``: required ones it fills.
    """
    try:
        params = signature_defaults(factory, skip)
        takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # no signature to check against
        return
    for key, value in options.items():
        if key not in params:
            if takes_any:
                continue
            raise ConfigError(f"{path}.{key}", f"{what} {verb} no option {key!r}",
                              suggestions=closest_names(key, params), allowed=sorted(params) or "no options")
        _check_type(value, params[key], f"{path}.{key}", what)
    for key, default in params.items():
        if default is inspect.Parameter.empty and key not in options and key not in filled:
            raise ConfigError(f"{path}.{key}", f"missing: {what} needs a value for {key!r}",
                              hint=f"add +{path}.{key}=VALUE")


def _check_type(value: Any, default: Any, path: str, what: str) -> None:
    if value is None or default is None or default is inspect.Parameter.empty:
        return
    if isinstance(default, bool):
        ok, expected = isinstance(value, bool), "true or false"
    elif isinstance(default, (int, float)):
        ok, expected = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif isinstance(default, str):
        ok, expected = isinstance(value, str), "a string"
    elif isinstance(default, (tuple, list)):
        ok, expected = isinstance(value, (tuple, list)) and len(value) == len(default), \
            f"a list of {len(default)} like {list(default)}"
    else:
        return
    if not ok:
        raise ConfigError(path, f"{what} expects {expected} (default {default!r}), got {value!r}")
