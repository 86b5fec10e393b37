"""From the ``hooks`` config to plugin objects: every name and option is checked before any is built."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from modelforge.config import to_plain, validate
from modelforge.errors import ConfigError, ModelforgeError
from modelforge.hooks.base import HookPlugin
from modelforge.registry import HOOKS

SHAPE_HINT = "on the command line: hooks=[verbose,grad_clip]; in YAML: hooks: {verbose: {}, grad_clip: {value: 0.5}}"


def build_hook_plugins(hooks_cfg: Mapping[str, Any] | None, *, path: str = "hooks") -> list[HookPlugin]:
    """Build the plugins of a ``hooks`` mapping (plugin name -> options), in its order.

    ``None`` or an empty mapping builds nothing. An unknown plugin name raises
    UnknownNameError; an unknown option, a wrong type or a bad value raises
    ConfigError at ``<path>.<plugin>.<option>``. All plugins are validated
    before the first is built.
    """
    plain = to_plain(hooks_cfg)
    if not plain:
        return []
    if not isinstance(plain, Mapping):
        raise ConfigError(path, f"must map plugin names to options, got {type(plain).__name__} {plain!r}",
                          allowed=HOOKS.names(), hint=SHAPE_HINT)
    checked = []
    for name, options in plain.items():
        where = f"{path}.{name}"
        plugin_cls = HOOKS.get(str(name), path=where)
        schema = HOOKS.schema(str(name)) or getattr(plugin_cls, "Options", None)
        if schema is None:
            raise ModelforgeError(f"{where}: hook plugin {name!r} was registered without an options schema")
        options = {} if options is None else options
        if not isinstance(options, Mapping):
            raise ConfigError(where, f"options must be a mapping, got {type(options).__name__} {options!r}",
                              hint=SHAPE_HINT)
        checked.append((plugin_cls, validate(options, schema, where, f"hook plugin {name!r}"), where))
    return [plugin_cls(options, path=where) for plugin_cls, options, where in checked]


def check_precision(plugins: Iterable[HookPlugin], precision: str) -> None:
    """Raise ConfigError when a plugin cannot run under the trainer's ``precision`` (e.g. '16-mixed')."""
    for plugin in plugins:
        plugin.check_precision(str(precision))
