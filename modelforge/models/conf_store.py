"""The models' signature defaults, offered to Hydra as config nodes.

``conf/model/cnn.yaml`` starts from ``/model_defaults/cnn`` (generated here from
the schema, i.e. from ``CNN``'s signature) and adds only deliberate overrides, so
no default is written twice and ``model.kernel_size=5`` still overrides a key
that exists. Stored in Hydra's ConfigStore on ``import modelforge``.
"""

from __future__ import annotations

from modelforge.registry import MODELS

DEFAULTS_GROUP = "model_defaults"


def store_model_defaults(names: tuple[str, ...]) -> None:
    """Put these models' defaults in Hydra's ConfigStore as ``model_defaults/<name>``."""
    from hydra.core.config_store import ConfigStore

    from modelforge.config import schema_defaults

    store = ConfigStore.instance()
    for name in names:
        schema = MODELS.schema(name)
        if schema is not None:
            store.store(group=DEFAULTS_GROUP, name=name, node=schema_defaults(schema), provider="modelforge")
