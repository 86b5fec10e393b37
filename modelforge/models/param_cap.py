"""A cap on how many values a model holds, checked before they are allocated.

A width or a shape typed with a few zeros too many (``enc_sizes=[100000000]``, a ``parameter`` of shape
``[100000, 100000]``) would allocate gigabytes to terabytes before anything fails. Its parameters and
buffers are counted on torch's meta device (shapes without storage) and a model of more than the model
option ``max_params`` refused, naming the count, the cap, its key and the largest tensor, before the real
one is made: a whole model made on meta first (:func:`modelforge.build.build_checked_model`), or a graph
block by block (:class:`ParamBudget`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from modelforge.config import require_positive
from modelforge.errors import ConfigError

MAX_PARAMS = 1_000_000_000  # 4 GB of float32: ViT-H holds 632 M, the zoo's largest (vit_b_16) 86 M
# The option, for models whose constructors do not take it: the builder reads it (modelforge.build).
PARAM_CAP_OPTION = {"max_params": (int, MAX_PARAMS)}
_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def _bytes(n: float) -> str:
    unit = 0
    while n >= 1000 and unit < len(_UNITS) - 1:
        n, unit = n / 1000, unit + 1
    return f"{n:.1f} {_UNITS[unit]}"


def check_param_count(model: nn.Module, max_params: int, path: str = "model", spent: int = 0,
                      where: str | None = None) -> int:
    """The parameters and buffers of ``model`` (on the meta device, or made) plus ``spent``: refused when more than
    ``max_params``, naming the count, the cap's key (``path.max_params``) and the largest tensor. ``where``: the
    config path of the part being counted (the model's ``path`` by default)."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    total = spent + sum(t.numel() for _, t in tensors)
    if total <= max_params:
        return total
    name, largest = max(tensors, key=lambda item: item[1].numel())
    raise ConfigError(where or path, f"the model would hold {total:,} parameters and buffers ({_bytes(4 * total)} "
                      f"as float32), more "
                      f"than {path}.max_params ({max_params:,}); the largest is {name} {list(largest.shape)}",
                      hint=f"set {path}.max_params={total} if the model really is that large")


class ParamBudget:
    """``max_params`` checked block by block as a graph is made, before each is allocated: a block whose arguments
    could describe more values than the cap is first made on the meta device and counted (the model as a whole
    is counted once made, :func:`check_param_count`).

    A weight holds the product of its sizes: a block's whole-number arguments bound it by the product of a
    shape's sizes, of the three largest sizes, or the largest squared (an attention's projections), times 16
    (a 4x4 kernel, four projections). Blocks under that bound (every layer of the zoo) cost no meta construction.
    """

    def __init__(self, max_params: int, path: str = "model") -> None:
        require_positive(max_params, f"{path}.max_params")
        self.max_params, self.path = max_params, path

    def check_before(self, factory: Callable[..., nn.Module], kwargs: dict[str, Any], where: str) -> None:
        """Refuse a block that alone would hold more than the cap, made on the meta device only if it could."""
        if _bound(kwargs) * 16 <= self.max_params:
            return
        try:
            with torch.device("meta"):
                probe = factory(**kwargs)
        except Exception:  # noqa: BLE001  (the real construction raises what is wrong with it)
            return
        if isinstance(probe, nn.Module):
            check_param_count(probe, self.max_params, self.path, where=where)


def _bound(kwargs: Mapping[str, Any]) -> int:
    """The largest of: the product of the sizes in a list argument (a shape), the product of the three largest
    whole-number arguments, the largest squared."""
    scalars: list[int] = []
    shapes = [1]
    for value in kwargs.values():
        if isinstance(value, (list, tuple)):
            sizes = [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v > 1]
            shapes.append(math.prod(sizes))
        elif isinstance(value, int) and not isinstance(value, bool) and value > 1:
            scalars.append(value)
    scalars.sort()
    largest = scalars[-1] if scalars else 1
    return max(max(shapes), math.prod(scalars[-3:]), largest * largest)
