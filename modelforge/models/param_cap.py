"""A cap on how many values a model holds, checked before they are allocated.

A width or a shape typed with a few zeros too many (``enc_sizes=[100000000]``, a ``parameter`` of shape
``[100000, 100000]``) would allocate gigabytes to terabytes before anything fails. Its parameters and
buffers are counted on torch's meta device (shapes without storage) and a model of more than the model
option ``max_params`` refused, naming the count, the cap, its key and the largest tensor, before the real
one is made: a graph block by block (:class:`ParamBudget`); cnn and mlp count theirs from their options
(:func:`check_sizes`, in their config checks), without making anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from modelforge.config import require_positive
from modelforge.errors import ConfigError
from modelforge.layers.activations import make_activation

MAX_PARAMS = 1_000_000_000  # 4 GB of float32: ViT-H holds 632 M, the zoo's largest (vit_b_16) 86 M
# The option, for models whose constructors do not take it: the builder reads it (modelforge.build).
PARAM_CAP_OPTION = {"max_params": (int, MAX_PARAMS)}
_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def _bytes(n: float) -> str:
    unit = 0
    while n >= 1000 and unit < len(_UNITS) - 1:
        n, unit = n / 1000, unit + 1
    return f"{n:.1f} {_UNITS[unit]}"


def check_param_count(model: nn.Module, max_params: int, path: str = "model", where: str | None = None) -> None:
    """The parameters and buffers of ``model`` (on the meta device, or made): refused when more than ``max_params``,
    naming the count, the cap's key (``path.max_params``) and the largest tensor. ``where``: the config path of
    the part being counted (the model's ``path`` by default)."""
    require_positive(max_params, f"{path}.max_params")
    if sum(t.numel() for t in [*model.parameters(), *model.buffers()]) <= max_params:
        return  # the names are only needed to say which tensor is largest
    tensors = [(name, list(t.shape)) for name, t in [*model.named_parameters(), *model.named_buffers()]]
    check_sizes(tensors, max_params, path, where)


def check_sizes(tensors: Sequence[tuple[str, Sequence[int]]], max_params: int, path: str = "model",
                where: str | None = None) -> None:
    """Refuse tensors (name, shape) that hold more than ``max_params`` values in all (see :func:`check_param_count`)."""
    require_positive(max_params, f"{path}.max_params")
    total = sum(math.prod(shape) for _, shape in tensors)
    if total <= max_params:
        return
    name, largest = max(tensors, key=lambda item: math.prod(item[1]))
    raise ConfigError(where or path, f"the model would hold {total:,} parameters and buffers ({_bytes(4 * total)} "
                      f"as float32), more than {path}.max_params ({max_params:,}); the largest is {name} {list(largest)}",
                      hint=f"set {path}.max_params={total} if the model really is that large")


def activation_shapes(spec: Any, prefix: str) -> list[tuple[str, list[int]]]:
    """The parameters of the activation ``spec`` names (a PReLU's slope; most have none), made to count them."""
    if not spec:
        return []
    module = make_activation(spec)
    return [(f"{prefix}.{name}", list(t.shape)) for name, t in [*module.named_parameters(), *module.named_buffers()]]


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
        if size_bound(kwargs) * 16 <= self.max_params:
            return
        try:
            with torch.device("meta"):
                probe = factory(**kwargs)
        except Exception:  # noqa: BLE001  (the real construction raises what is wrong with it)
            return
        if isinstance(probe, nn.Module):
            check_param_count(probe, self.max_params, self.path, where=where)


def size_bound(kwargs: Mapping[str, Any]) -> int:
    """The largest of: the product of the sizes in a list argument (a shape), the product of the three largest
    whole-number arguments, the largest squared; divided by ``groups`` (a grouped convolution's weight)."""
    return _sizes(kwargs, squared=True)


def size_guess(kwargs: Mapping[str, Any]) -> int:
    """:func:`size_bound` without the largest squared: roughly the values of a block's largest weight (a
    convolution's or a linear layer's; a norm's ``num_features`` alone is not a weight's size)."""
    return _sizes(kwargs, squared=False)


def _sizes(kwargs: Mapping[str, Any], squared: bool) -> int:
    scalars: list[int] = []
    shapes = [1]
    groups = kwargs.get("groups")
    for key, value in kwargs.items():
        if isinstance(value, (list, tuple)):
            sizes = [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v > 1]
            shapes.append(math.prod(sizes))
        elif isinstance(value, int) and not isinstance(value, bool) and value > 1 and key != "groups":
            scalars.append(value)
    scalars.sort()
    largest = scalars[-1] if scalars else 1
    bound = max(max(shapes), math.prod(scalars[-3:]), largest * largest if squared else 0)
    return bound // groups if isinstance(groups, int) and not isinstance(groups, bool) and groups > 1 else bound
