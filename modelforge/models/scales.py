"""Depth and width scales: one model file, several sizes (``model.scale=n``).

A model's ``scales`` table maps a name to ``{depth, width, max_channels}`` (or
ultralytics' list form ``[depth, width, max_channels]``). The rules, applied to
the nodes of the model's own ``nodes`` table (a composite's inside follows from
the arguments it is given):

- a ``repeat`` count ``n > 1`` becomes ``max(round(n * depth), 1)``; 1 stays 1;
- a width ``c`` becomes ``ceil(min(c, max_channels) * width / 8) * 8``. The widths are the
  ``out_channels`` argument of any block and the parameters a composite lists in its ``widths``;
- a width written from ``n_classes`` (``out_channels: n_classes``, a classifier's 1x1-conv head) is
  never scaled: the class count is the data's (as ultralytics exempts ``nc``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelforge.config import require_positive
from modelforge.config_types import check_type
from modelforge.errors import ConfigError, UnknownKeyError, closest_names
from modelforge.layers.expressions import names_in

WIDTH_ARG = "out_channels"  # the width argument of every block; a composite names more in its `widths`
CLASS_COUNT = "n_classes"  # a width written from it is the data's class count: never scaled
CHANNEL_MULTIPLE = 8


@dataclass(frozen=True)
class Scale:
    """Multipliers of one scale; the identity scale changes nothing."""

    depth: float = 1.0
    width: float = 1.0
    max_channels: int | None = None

    def repeats(self, n: int) -> int:
        return max(round(n * self.depth), 1) if n > 1 else n

    def channels(self, c: int) -> int:
        if self == IDENTITY:
            return c
        capped = min(c, self.max_channels) if self.max_channels else c
        return math.ceil(capped * self.width / CHANNEL_MULTIPLE) * CHANNEL_MULTIPLE


IDENTITY = Scale()


def scale_widths(scale: Scale, args: dict[str, Any], written: Mapping[str, Any], widths: tuple[str, ...]) -> dict[str, Any]:
    """``args`` (resolved) with each width in ``widths`` scaled, unless it was ``written`` from ``n_classes``."""
    scaled = dict(args)
    for key in widths:
        value = scaled.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and CLASS_COUNT not in names_in(written.get(key)):
            scaled[key] = scale.channels(value)
    return scaled


def _one_scale(spec: Any, path: str) -> Scale:
    if isinstance(spec, (list, tuple)):
        if len(spec) != 3:
            raise ConfigError(path, f"a scale as a list is [depth, width, max_channels], got {spec!r}")
        spec = dict(zip(("depth", "width", "max_channels"), spec))
    if not isinstance(spec, Mapping):
        raise ConfigError(path, f"expected {{depth, width, max_channels}}, got {spec!r}")
    fields = ("depth", "width", "max_channels")
    for key in spec:
        if key not in fields:
            raise UnknownKeyError(f"{path}.{key}", key, f"a scale has no option {key!r}", fields)
    for key in ("depth", "width"):
        if key in spec:
            check_type(spec[key], float, f"{path}.{key}")
            require_positive(spec[key], f"{path}.{key}")
    if spec.get("max_channels") is not None:
        check_type(spec["max_channels"], int, f"{path}.max_channels")
        require_positive(spec["max_channels"], f"{path}.max_channels")
    return Scale(**dict(spec))


def choose_scale(scales: Mapping[str, Any] | None, scale: str | None, path: str = "model") -> Scale:
    """The scale ``scale`` names in ``scales`` (checked), or the identity when neither is set."""
    table = {str(k): _one_scale(v, f"{path}.scales.{k}") for k, v in (scales or {}).items()}
    if scale is None:
        if table:
            raise ConfigError(f"{path}.scale", "this model has scales; choose one", allowed=list(table),
                              hint=f"e.g. {path}.scale={next(iter(table))}")
        return IDENTITY
    if not table:
        raise ConfigError(f"{path}.scale", f"this model has no scales table, so scale {scale!r} means nothing",
                          hint=f"remove {path}.scale, or add a `scales` table to the model file")
    if str(scale) not in table:
        same_but_case = [name for name in table if name.lower() == str(scale).lower()]  # N -> n
        raise ConfigError(f"{path}.scale", f"unknown scale {scale!r}", allowed=list(table),
                          suggestions=same_but_case or closest_names(str(scale), table))
    return table[str(scale)]
