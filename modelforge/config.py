"""Config schemas and their validation, done before anything is built.

A schema is a dataclass whose fields are the allowed keys, whose annotations
are the allowed types and whose ``check(path)`` method holds the rules types
cannot say (positive sizes, kernels that fit). Errors carry the config path.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from omegaconf import DictConfig, ListConfig, OmegaConf

from modelforge.errors import ConfigError, closest_names

S = TypeVar("S")

# Top-level keys of the CLI that are forwarded into the model config, so that
# `python -m modelforge train model=cnn enc_sizes=[32,64]` works as written.
MODEL_SHORTCUTS = ("enc_sizes", "dec_sizes", "activation")


def to_plain(cfg: Any) -> Any:
    """DictConfig/ListConfig -> resolved plain dicts and lists; other values unchanged."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def load_config(cfg: Mapping | DictConfig | str | Path) -> dict[str, Any]:
    """Accept a dict, an OmegaConf config or a YAML path; return a plain dict."""
    if isinstance(cfg, (str, Path)):
        path = Path(cfg)
        if not path.is_file():
            raise ConfigError(str(cfg), "config file not found")
        cfg = OmegaConf.load(path)
    plain = to_plain(cfg)
    if not isinstance(plain, Mapping):
        raise ConfigError("", f"a config must be a mapping, got {type(plain).__name__}")
    return dict(plain)


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}" if args else "list"
    if tp is Any:
        return "any value"
    return getattr(tp, "__name__", str(tp))


def _matches(value: Any, tp: Any, path: str) -> bool:
    """True when ``value`` fits ``tp``; list elements that do not fit raise with their index."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_matches(value, arm, path) for arm in args)
    if origin is Literal:
        return value in args
    if origin is list:
        if not isinstance(value, (list, tuple)):
            return False
        for i, item in enumerate(value):
            check_type(item, args[0], f"{path}[{i}]")
        return True
    if origin in (dict, Mapping):
        return isinstance(value, Mapping)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def check_type(value: Any, tp: Any, path: str) -> None:
    """Raise a ConfigError when ``value`` does not fit the annotation ``tp``."""
    if not _matches(value, tp, path):
        suggestions: list[str] = []
        if typing.get_origin(tp) is Literal or any(typing.get_origin(a) is Literal for a in typing.get_args(tp)):
            choices = [str(a) for arm in (tp, *typing.get_args(tp)) for a in typing.get_args(arm)
                       if typing.get_origin(arm) is Literal]
            suggestions = closest_names(str(value), choices)
        raise ConfigError(
            path,
            f"expected {_type_name(tp)}, got {type(value).__name__} {value!r}",
            allowed=_type_name(tp),
            suggestions=suggestions,
        )


def validate(values: Mapping[str, Any], schema: type[S], path: str, what: str) -> S:
    """Check ``values`` against a dataclass ``schema`` and return the filled instance.

    Unknown keys, wrong types and whatever the schema's ``check(path)`` rejects
    raise ConfigError naming ``path.key``.
    """
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    for key in values:
        if key not in fields:
            raise ConfigError(
                f"{path}.{key}" if path else str(key),
                f"{what} has no option {key!r}",
                allowed=sorted(fields),
                suggestions=closest_names(str(key), fields),
            )
    for key, value in values.items():
        check_type(value, hints[key], f"{path}.{key}" if path else key)
    instance = schema(**values)
    check = getattr(instance, "check", None)
    if check is not None:
        check(path)
    return instance


def require_positive(values: Any, path: str, *, allow_empty: bool = False) -> None:
    """Sizes must be positive integers; lists of sizes must not be empty (unless allowed)."""
    if isinstance(values, (list, tuple)):
        if not values and not allow_empty:
            raise ConfigError(path, "must not be empty", allowed="a list of positive integers")
        for i, v in enumerate(values):
            if v <= 0:
                raise ConfigError(f"{path}[{i}]", f"must be positive, got {v}", allowed="integers >= 1")
    elif values <= 0:
        raise ConfigError(path, f"must be positive, got {values}", allowed="numbers > 0")


def require_probability(value: float, path: str) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(path, f"must be in [0, 1), got {value}", allowed="0 <= p < 1")


def apply_model_shortcuts(root: Mapping[str, Any], model_keys: set[str]) -> dict[str, Any]:
    """Return ``root['model']`` with the top-level shortcuts that were set merged in.

    A shortcut the chosen model does not take is an error, not silently dropped.
    """
    model = dict(root.get("model") or {})
    for key in MODEL_SHORTCUTS:
        value = root.get(key)
        if value is None:
            continue
        if key not in model_keys:
            raise ConfigError(
                key,
                f"model {model.get('name')!r} does not take {key!r}",
                allowed=sorted(model_keys - {"name"}),
                hint=f"remove {key}=... or pick a model that has it (e.g. model=cnn)",
            )
        model[key] = value
    return model
