"""Shapes from the data: a model's ``in_channels``, ``input_size`` and ``n_classes`` follow its data module.

A key the user did not set (absent, null, or the model's own default, as the shipped ``conf/model``
files carry it) takes the data's value; one set on purpose that disagrees is an error before any work.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from modelforge.config import schema_defaults, signature_defaults
from modelforge.errors import ConfigError
from modelforge.registry import MODELS

SHAPE_KEYS = ("in_channels", "input_size", "n_classes")


def data_shapes(datamodule: Any) -> dict[str, Any]:
    """The model keys a data module decides: from its ``input_shape`` (C, H, W) and ``n_classes``."""
    shapes: dict[str, Any] = {}
    if (input_shape := getattr(datamodule, "input_shape", None)) is not None:
        shapes.update(in_channels=int(input_shape[0]), input_size=[int(d) for d in input_shape[1:]])
    if (n_classes := getattr(datamodule, "n_classes", None)) is not None:
        shapes["n_classes"] = int(n_classes)
    return shapes


def fill_model_shapes(model_cfg: Mapping[str, Any], datamodule: Any, explicit: Collection[str] = (),
                      keep_given: bool = False) -> dict[str, Any]:
    """``model_cfg`` with the data's shapes filled in where the user left them to the data.

    ``explicit``: model keys set on purpose (named in a command-line override) even if equal to the default.
    ``keep_given``: a key set on purpose keeps its value (``summary``: the model at the sizes you give it) rather
    than being refused for differing from the data's."""
    filled = dict(model_cfg)
    defaults = _model_defaults(filled.get("name"))
    data_name = getattr(datamodule, "name", type(datamodule).__name__)
    for key, value in data_shapes(datamodule).items():
        if key not in defaults:  # this model has no such option (a graph's classes are its head's width)
            continue
        given, default = (list(v) if isinstance(v, (list, tuple)) else v for v in (filled.get(key), defaults[key]))
        set_on_purpose = given is not None and (key in explicit or given != default)
        if keep_given and (set_on_purpose or (given is None and default is not None)):
            continue  # n_classes: null, a backbone without its head, stays one
        if set_on_purpose and given != value:
            raise ConfigError(f"model.{key}", f"is {given}, but data {data_name!r} gives {value}",
                              hint=f"leave model.{key} unset (null) to take it from the data")
        filled[key] = value
    return filled


def _model_defaults(name: Any) -> dict[str, Any]:  # of a known model: model_config_from_run checked the name
    factory, schema = MODELS.get(name, path="model.name"), MODELS.schema(name)
    defaults = schema_defaults(schema) if schema is not None else {}
    try:
        defaults.update({k: v for k, v in signature_defaults(factory).items() if k in SHAPE_KEYS})
    except (TypeError, ValueError):  # no signature
        pass
    return defaults


def explicit_model_keys(overrides: Collection[str]) -> set[str]:
    """Model keys named in command-line overrides (``model.n_classes=5``, ``+model.in_channels=3``)."""
    keys = (override.lstrip("+~").split("=", 1)[0] for override in overrides)
    return {key.split(".", 1)[1] for key in keys if key.startswith("model.") and key.count(".") == 1}
