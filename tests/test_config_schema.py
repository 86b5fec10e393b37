"""schema_from_signature: a config schema read from a constructor, defaults written once."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pytest

from modelforge import ConfigError
from modelforge.config import schema_defaults, schema_from_signature, validate


class Toy:
    def __init__(self, width: int, sizes: Sequence[int] = (1, 2), kind: Literal["a", "b"] = "a",
                 opts: Mapping[str, Any] | None = {"x": 1}, free=None, *args: Any, **kwargs: Any) -> None:  # noqa: B006
        pass


def _check(cfg: Any, path: str) -> None:
    if cfg.width > 100:
        raise ConfigError(f"{path}.width", "too wide")


def test_fields_types_and_defaults_come_from_the_signature() -> None:
    schema = schema_from_signature(Toy, "toy", check=_check)
    assert [f.name for f in dataclasses.fields(schema)] == ["name", "width", "sizes", "kind", "opts", "free"]
    assert schema_defaults(schema) == {"name": "toy", "width": "???", "sizes": [1, 2], "kind": "a",
                                          "opts": {"x": 1}, "free": None}
    a, b = validate({"width": 3}, schema, "m", "toy"), validate({"width": 3}, schema, "m", "toy")
    assert a.opts == {"x": 1} and a.opts is not b.opts  # a mutable default is copied, never shared


@pytest.mark.parametrize(("values", "match"), [
    ({}, r"m.width: missing: toy needs 'width'"),
    ({"width": "3"}, r"m.width: expected int, got str '3'"),
    ({"width": 3, "sizes": 4}, r"m.sizes: expected list of int, got int 4"),
    ({"width": 3, "kind": "c"}, r"m.kind: expected 'a' \| 'b', got str 'c'"),
    ({"width": 3, "opts": [1]}, r"m.opts: expected mapping or null, got list \[1\]"),
    ({"width": 3, "widht": 1}, r"(?s)m.widht: toy has no option 'widht'.*did you mean 'width'"),
    ({"width": 300}, r"m.width: too wide"),
])
def test_types_required_keys_and_checks(values: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        validate(values, schema_from_signature(Toy, "toy", check=_check), "m", "toy")


def test_a_partial_is_a_variant_with_other_defaults() -> None:
    schema = schema_from_signature(functools.partial(Toy, width=5, kind="b"), "toy5")
    assert schema_defaults(schema) == {"name": "toy5", "width": 5, "sizes": [1, 2], "kind": "b",
                                          "opts": {"x": 1}, "free": None}
    with pytest.raises(ConfigError, match=r"m.kind: expected 'a' \| 'b'"):
        validate({"kind": "z"}, schema, "m", "toy5")  # types still come from Toy's annotations
