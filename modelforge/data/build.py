"""``data=<name>``: the LightningDataModule a run trains on, from the DATAMODULES registry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelforge.config import check_call
from modelforge.registry import DATAMODULES


def build_datamodule(data_cfg: Mapping[str, Any]) -> Any:
    """The data module named by ``data.name`` (default ``mnist``), its options checked first."""
    options = dict(data_cfg)
    name = options.pop("name", "mnist")
    factory = DATAMODULES.get(name, path="data.name")
    check_call(factory, options, "data", f"data module {name!r}")
    return factory(**options)


def describe_data(datamodule: Any) -> dict[str, Any]:
    """What metrics.json says of the data: its name, input shape and number of classes."""
    info: dict[str, Any] = {}
    for key in ("name", "input_shape", "n_classes"):
        value = getattr(datamodule, key, None)
        if value is not None:
            info[key] = list(value) if isinstance(value, tuple) else value
    return info
