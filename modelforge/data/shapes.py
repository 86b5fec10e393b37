"""Shapes from the data: a model's ``in_channels``, ``input_size`` and ``n_classes`` follow its data module.

A key the user did not set (absent, null, or the model's own default, as the shipped
``conf/model`` files carry it) takes the data's value; a value the user did set and that
disagrees with the data is an error before any work starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from modelforge.config import signature_defaults
from modelforge.errors import ConfigError
from modelforge.registry import MODELS


def data_shapes(datamodule: Any) -> dict[str, Any]:
    """The model keys a data module decides: from its ``input_shape`` (C, H, W) and ``n_classes``."""
    shapes: dict[str, Any] = {}
    input_shape = getattr(datamodule, "input_shape", None)
    if input_shape is not None:
        shapes["in_channels"] = int(input_shape[0])
        shapes["input_size"] = [int(d) for d in input_shape[1:]]
    n_classes = getattr(datamodule, "n_classes", None)
    if n_classes is not None:
        shapes["n_classes"] = int(n_classes)
    return shapes


def fill_model_shapes(model_cfg: Mapping[str, Any], datamodule: Any, explicit: Collection[str] = ()) -> dict[str, Any]:
    """``model_cfg`` with the data's shapes filled in where the user left them to the data.

    ``explicit``: model keys set on purpose (e.g. named in a command-line override) even when
    equal to the model's default.
    """
    filled = dict(model_cfg)
    name = filled.get("name")
    defaults = _model_defaults(name)
    data_name = getattr(datamodule, "name", type(datamodule).__name__)
    for key, value in data_shapes(datamodule).items():
        if key not in defaults:  # this model has no such option (a graph's classes are its head's width)
            continue
        given = filled.get(key)
        given = list(given) if isinstance(given, (list, tuple)) else given
        default = defaults[key]
        default = list(default) if isinstance(default, (list, tuple)) else default
        set_on_purpose = given is not None and (key in explicit or given != default)
        if set_on_purpose and given != value:
            raise ConfigError(f"model.{key}", f"is {given}, but data {data_name!r} gives {value}",
                              hint=f"leave model.{key} unset (null) to take it from the data")
        filled[key] = value
    return filled


def _model_defaults(name: Any) -> dict[str, Any]:
    try:
        factory = MODELS.get(name, path="model.name")
    except ConfigError:
        return {}
    defaults: dict[str, Any] = {}
    schema = MODELS.schema(name)
    if schema is not None:
        for f in dataclasses.fields(schema):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
    try:
        defaults.update({k: v for k, v in signature_defaults(factory).items() if k in ("in_channels", "input_size", "n_classes")})
    except (TypeError, ValueError):
        pass
    return defaults


def explicit_model_keys(overrides: Collection[str]) -> set[str]:
    """Model keys named in command-line overrides (``model.n_classes=5``, ``+model.in_channels=3``)."""
    keys = set()
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key.startswith("model.") and key.count(".") == 1:
            keys.add(key.split(".", 1)[1])
    return keys
