"""Check `key=value` overrides against the composed config, for a did-you-mean error.

Hydra refuses a key the config lacks ("Key 'enc_size' is not in struct") but names
neither the keys that exist there nor the closest one. This check composes the config
with the command's group choices, then looks up each plain override's key in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelforge.cli.group_choices import SWEEP_EXPRESSION
from modelforge.errors import ConfigError, closest_names
from modelforge.paths import conf_dir, config_groups

# Flags that compose another config than the command's own: leave those to Hydra.
_OTHER_CONFIG_FLAGS = ("--config-name", "-cn", "--config-dir", "-cd", "--config-path", "-cp")


def is_swept(value: str) -> bool:
    """True for a sweep (`cnn,mlp`, `[a],[b]`, `glob(*)`), False for one option or one list."""
    if SWEEP_EXPRESSION.search(value):
        return True
    depth = 0
    for char in value:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            return True
    return False


def split_overrides(
    argv: list[str], groups: Mapping[str, list[str]] | None = None
) -> tuple[list[str], list[str], bool]:
    """(group choices, plain keys to check, whether a group is swept) from the command line."""
    groups = config_groups() if groups is None else groups
    choices: list[str] = []
    keys: list[str] = []
    swept_group = False
    for arg in argv:
        if arg.startswith(("-", "+", "~")) or "=" not in arg:
            continue  # flags, additions (+key), deletions (~key)
        key, value = arg.split("=", 1)
        if key in groups:
            swept_group = swept_group or is_swept(value)
            choices.append(arg)
        elif "/" not in key and not key.startswith("hydra.") and "[" not in key and "@" not in key:
            keys.append(key)
    return choices, keys, swept_group


def check_override_keys(config_name: str, argv: list[str]) -> None:
    """Raise ConfigError for an override whose key the composed config does not have."""
    groups = config_groups()
    choices, keys, swept_group = split_overrides(argv, groups)
    if not keys or swept_group or any(arg.startswith(_OTHER_CONFIG_FLAGS) for arg in argv):
        return
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name=config_name):
            cfg = compose(config_name, overrides=choices)
        plain = OmegaConf.to_container(cfg, resolve=False)
    except Exception:  # noqa: BLE001 - a composition problem is Hydra's to report, as usual
        return
    for key in keys:
        _check_key(plain, key, groups)


def _check_key(config: Mapping[str, Any], key: str, groups: Mapping[str, list[str]]) -> None:
    node: Any = config
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, Mapping):
            return  # below a value (None, a list): Hydra decides
        if part in node:
            node = node[part]
            continue
        parent = ".".join(parts[:depth])
        where = f"'{parent}'" if parent else "the top level of the config"
        hint = f"to add a key that is not in the config, write +{key}=..."
        if parent in groups and part in groups[parent]:
            hint = f"'{part}' is an option of the {parent} group: select it first, e.g. {parent}=[{part}]"
        elif not parent and part in groups and len(parts) > 1 and parts[1] in groups[part]:
            hint = f"{part} is a config group: select the option first, e.g. {part}=[{parts[1]}]"
        raise ConfigError(
            ".".join(parts[: depth + 1]),
            f"no key {part!r} at {where}",
            allowed=sorted(str(k) for k in node),
            suggestions=closest_names(part, [str(k) for k in node]),
            hint=hint,
        )
