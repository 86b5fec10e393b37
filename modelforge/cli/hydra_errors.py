"""Hydra's and OmegaConf's composition errors, told as modelforge's one-message errors.

Hydra composes the config once; when it refuses an override, its exception says
which (``MissingConfigException.missing_cfg_file``, the OmegaConf cause's
``full_key`` and ``parent_node``). This turns that into a ConfigError with the
closest name and what is allowed, computed from the search path in use, so the
options of ``--config-dir`` and ``hydra.searchpath`` are suggested too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hydra.errors import (
    CompactHydraException,
    ConfigCompositionException,
    InstantiationException,
    MissingConfigException,
    OverrideParseException,
    SearchPathException,
)
from omegaconf import OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
)

from modelforge.cli.command_line import CommandLine
from modelforge.errors import (
    ConfigError,
    ModelforgeError,
    UnknownNameError,
    closest_names,
)

# Hydra 1.3's wording of the refusals that carry no structured detail.
_NOT_IN_DEFAULTS = re.compile(r"Could not override '([^']+)'\. No match in the defaults list")
_NO_KEY = re.compile(r"Could not override '([^']+)'\.")
_MULTIPLE = re.compile(r"Multiple values for ([\w/.]+)\.")


def config_error(exc: BaseException, cmd: CommandLine) -> ModelforgeError | None:
    """The one-message error for ``exc``, or None when it is not a config problem."""
    if isinstance(exc, ModelforgeError):
        return exc
    if isinstance(exc, InstantiationException) or not isinstance(exc, (CompactHydraException, OmegaConfBaseException)):
        return None
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        if option.endswith(".yaml"):
            option = option[: -len(".yaml")]
        return UnknownNameError(f"{group} option", option, exc.options or cmd.group_options(group), path=group)
    if isinstance(exc, OverrideParseException):
        return ConfigError(exc.override, exc.message.split("\n")[0],
                           hint="quote a value with spaces or brackets, e.g. 'key=[1,2]'; "
                                "grammar: https://hydra.cc/docs/advanced/override_grammar/basic/")
    if isinstance(exc, SearchPathException):
        return ConfigError("--config-dir", str(exc))
    message = str(exc)
    cause = exc.__cause__
    if isinstance(exc, ConfigCompositionException):
        if match := _NOT_IN_DEFAULTS.search(message):
            return _not_in_defaults(match.group(1), cmd)
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and (match := _NO_KEY.search(message)):
            return _unknown_key(match.group(1), cause, cmd)
        if match := _MULTIPLE.search(message):
            group = match.group(1)
            return ConfigError(group, f"the {cmd.config_name} config already picks a {group} option",
                               hint=f"write {group}=OPTION to choose another; +{group}=... adds a group "
                                    "the config does not have")
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        return ConfigError(str(cause.full_key), str(getattr(cause, "msg", cause)).split("\n")[0])
    return ConfigError("", message.split("\nConfig search path")[0].strip() or type(exc).__name__)


def _override_value(group: str, cmd: CommandLine) -> Any:
    return next((o.value() for o in cmd.overrides if o.key_or_group == group), None)


def _not_in_defaults(group: str, cmd: CommandLine) -> ConfigError:
    options = cmd.group_options(group)
    value = _override_value(group, cmd)
    chosen = [str(v) for v in (value if isinstance(value, list) else [value]) if v is not None]
    unknown = [v for v in chosen if v not in options]
    if options and unknown:
        return UnknownNameError(f"{group} option", unknown[0], options, path=group)
    return ConfigError(group, f"the {cmd.config_name} config has no {group} group in its defaults",
                       hint=f"+{group}={','.join(chosen) or 'OPTION'} adds it" if options else None)


def _unknown_key(key: str, cause: OmegaConfBaseException, cmd: CommandLine) -> ConfigError:
    """A ``key=value`` override whose key the composed config lacks: the closest key there, and what exists."""
    node = getattr(cause, "parent_node", None)
    root = node._get_root() if node is not None else None
    config: Any = OmegaConf.to_container(root, resolve=False) if root is not None else {}
    config.pop("hydra", None)
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if isinstance(config, Mapping) and part in config:
            config = config[part]
            continue
        keys = sorted(str(k) for k in config) if isinstance(config, Mapping) else []
        parent = ".".join(parts[:depth])
        where = f"'{parent}'" if parent else "the top level of the config"
        return ConfigError(".".join(parts[: depth + 1]), f"no key {part!r} at {where}", allowed=keys,
                           suggestions=closest_names(part, keys), hint=_key_hint(key, parts, depth, cmd))
    return ConfigError(key, str(getattr(cause, "msg", cause)).split("\n")[0])


def _key_hint(key: str, parts: list[str], depth: int, cmd: CommandLine) -> str:
    if depth == 0 and len(parts) > 1 and parts[1] in cmd.group_options(parts[0]):
        return f"{parts[0]} is a config group: select the option first, e.g. {parts[0]}=[{parts[1]}]"
    parent = ".".join(parts[:depth])
    if depth and parts[depth] in cmd.group_options(parent.replace(".", "/")):
        return f"'{parts[depth]}' is an option of the {parent} group: select it first, e.g. {parent}=[{parts[depth]}]"
    return f"to add a key that is not in the config, write +{key}=..."
