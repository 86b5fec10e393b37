"""A model config composed by name, as ``model=<name>`` is on the command line: ``create_model``'s first step.

Overrides are keys of the model config in Hydra's own syntax (``depth=3``, ``~nodes.flat``,
``+params.extra=1``); an override Hydra refuses is one error naming the key as the user wrote it,
with the keys that exist there, and for a model file without its ``/model_defaults/...`` line, that line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig

from modelforge.config import bound_yaml_file, conf_dir, config_groups, yaml_file_error
from modelforge.config_shadows import check_not_shadowed, selected_configs, unread_file_error, user_yaml_files
from modelforge.errors import ConfigError, UnknownKeyError, closest_names
from modelforge.models.definitions import defaults_cycle, missing_defaults_hint

_HYDRA_PREFIXES = "~+"


def model_override(override: str) -> str:
    """A model key's override as Hydra reads it in the run config: ``depth=3`` -> ``model.depth=3``, with Hydra's
    prefixes kept in front (``~nodes.flat`` -> ``~model.nodes.flat``, ``+params.x=1``, ``++...``)."""
    prefix = override[:len(override) - len(override.lstrip(_HYDRA_PREFIXES))]
    return f"{prefix}model.{override[len(prefix):]}"


PRIMARY = "create_model"  # conf/create_model.yaml: the model group alone


def compose_model(name: str, overrides: Sequence[str], folders: Sequence[Path]) -> DictConfig:
    """The config ``{model: ...}`` of ``model=name`` with the model ``overrides``; ``folders``: the config folders,
    conf/ first then the user's (searched after it, as ``--config-dir`` is: :mod:`modelforge.config_shadows`)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from modelforge.registry import load_builtins

    load_builtins()  # their defaults in Hydra's ConfigStore (model_defaults/...) before Hydra composes
    for path in (p for folder in folders[1:] for p in user_yaml_files(folder)):
        bound_yaml_file(path)  # Hydra parses what it selects: bombs never reach it
    extra = [f"hydra.searchpath=[file://{folder}]" for folder in folders[1:]]
    saved = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            if folders[1:]:  # Hydra's defaults list costs half a composition: only a user's folder can shadow
                check_not_shadowed(folders[1:], selected_configs(loader, PRIMARY, [[f"model={name}", *extra]], False))
            try:
                return compose(PRIMARY, overrides=[f"model={name}", *extra, *map(model_override, overrides)])
            except (HydraException, OmegaConfBaseException) as exc:
                raise _refused(exc, name, overrides, folders,
                               lambda: compose(PRIMARY, overrides=[f"model={name}", *extra])) from None
            except RecursionError:
                raise _cycle_error(name, folders) from None
            except yaml.YAMLError as exc:  # a file Hydra read: file:line:column, as the CLI says it
                raise yaml_file_error(exc) from None
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:
            GlobalHydra.instance().initialize(saved)


def _refused(exc: Exception, name: str, overrides: Sequence[str], folders: Sequence[Path], plain: Any) -> ConfigError:
    """Hydra's refusal as one error at the key the user wrote (``nodes.flatt``, not ``model.nodes.flatt``)."""
    message = (str(exc).splitlines() or [type(exc).__name__])[0]
    unparsed = str(getattr(exc, "override", "") or "")
    for override in overrides:
        key = override.lstrip(_HYDRA_PREFIXES).partition("=")[0]
        if unparsed and model_override(override) == unparsed:
            return ConfigError(override, message, hint="quote it: 'key=[1,2]'; grammar: "
                               "https://hydra.cc/docs/advanced/override_grammar/basic/")
        if f"'model.{key}'" not in message:
            continue
        if "already" in message:  # +key=... of a key the model has
            return ConfigError(key, f"model {name!r} already has {key!r}", hint=f"set it without '+': {key}=...")
        parent, last, keys = _first_missing(plain, key.split("."))
        verb = "delete" if "delete" in message else "override"
        hint = (missing_defaults_hint(name, folders) if not parent else None) or (
            f"to add a key the model does not have, write +{key}=..." if verb == "override" else None)
        return UnknownKeyError(key, last, f"cannot {verb} it: model {name!r} has no key {last!r}"
                           + (f" at {parent!r}" if parent else ""), keys, none=None, hint=hint)
    if unread := unread_file_error(folders[1:], f"model/{name}"):
        return unread
    models = config_groups().get("model", [])
    known = any(Path(folder, "model", f"{name}.yaml").is_file() for folder in folders)
    return ConfigError("model", f"cannot compose model {name!r}: {message}",
                       suggestions=() if known else closest_names(name, models))


def _first_missing(plain: Any, parts: list[str]) -> tuple[str, str, list[str]]:
    """Where a key path leaves the model config (composed without the user's overrides): the part that exists,
    the first key that does not, and the keys there."""
    try:
        node = plain().model
    except Exception:  # noqa: BLE001  (no keys to offer: the error stands without them)
        return ".".join(parts[:-1]), parts[-1], []
    for i, part in enumerate(parts):
        keys = sorted(str(k) for k in node) if hasattr(node, "keys") else []
        if part not in keys:
            return ".".join(parts[:i]), part, keys
        node = node[part]
    return ".".join(parts[:-1]), parts[-1], []


def _cycle_error(name: str, folders: Sequence[Path]) -> ConfigError:
    return defaults_cycle_error(folders) or ConfigError(
        "model", f"cannot compose model {name!r}: its defaults lists nest too deeply")


def defaults_cycle_error(folders: Sequence[Path]) -> ConfigError | None:
    """Hydra's RecursionError on a config file whose defaults list includes itself, as one error naming the file
    and the cycle (None when no file of ``folders`` does)."""
    found = defaults_cycle(folders)
    if found is None:
        return None
    path, cycle = found
    return ConfigError(str(path), f"the defaults list includes the file itself: {' -> '.join(cycle)}",
                       hint="remove that entry: a config file cannot be composed from itself")


def config_folders(search_path: Sequence[str]) -> list[Path]:
    """conf/ and the user's config folders of a command line (``--config-dir``, ``hydra.searchpath``: file:// URLs)."""
    return [conf_dir(), *(Path(url.removeprefix("file://")) for url in search_path if "://" not in url
                          or url.startswith("file://"))]
