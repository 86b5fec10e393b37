"""``data=<name>``: the LightningDataModule a run trains on, from DATAMODULES (built-ins registered by ``modelforge.data``)."""

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
    """What metrics.json says of the data: its name, input shape and number of classes, and what the module's
    ``describe()`` adds (an image folder's classes and split sizes)."""
    values = {key: getattr(datamodule, key, None) for key in ("name", "input_shape", "n_classes")}
    values.update(datamodule.describe() if callable(getattr(datamodule, "describe", None)) else {})
    return {key: list(v) if isinstance(v, tuple) else v for key, v in values.items() if v is not None}


def resolved_data_options(datamodule: Any) -> dict[str, Any]:
    """The ``data.*`` options a run records as its data module resolved them (an image folder's classes, in label
    order): its config then rebuilds the same data, and its checkpoint keeps the class names."""
    resolve = getattr(datamodule, "resolved_options", None)
    return dict(resolve()) if callable(resolve) else {}
