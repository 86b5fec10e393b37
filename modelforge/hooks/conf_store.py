"""The hook plugins' option defaults, offered to Hydra as config nodes.

``conf/hooks/verbose.yaml`` starts from ``/hook_defaults/verbose`` (generated here from
``VerboseOptions``), so a plugin's defaults live only in its Options dataclass while
``hooks.verbose.max_calls=3`` still overrides a key Hydra knows (and a misspelt key is
refused at composition). Stored in Hydra's ConfigStore on ``import modelforge``, as the
models' defaults are (``modelforge/models/conf_store.py``).
"""

from __future__ import annotations

import dataclasses

from modelforge.registry import HOOKS

DEFAULTS_GROUP = "hook_defaults"


def store_hook_defaults() -> None:
    """Put every built-in plugin's Options defaults in Hydra's ConfigStore as ``hook_defaults/<name>``."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name in HOOKS.names(plugins=False):
        schema = HOOKS.schema(name)
        if schema is not None:
            store.store(group=DEFAULTS_GROUP, name=name, node=dataclasses.asdict(schema()), provider="modelforge")
