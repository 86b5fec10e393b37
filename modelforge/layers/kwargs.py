"""Call a registered factory with config-given keyword arguments, checked first."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from modelforge.errors import ConfigError, closest_names


def accepted_kwargs(factory: Callable) -> list[str] | None:
    """Keyword names ``factory`` takes, or None when it takes ``**kwargs``."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]


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
