"""Element-wise math ops: ``exp``, ``log``, ``sqrt``, ``clamp``, and ``normalize`` (to unit L2 norm along a dim).

What Swin-V2's cosine attention needs besides arithmetic: ``normalize`` q and k (``F.normalize``), a
learned log-scale clamped (``clamp`` with ``max``) and taken back with ``exp``, log-spaced coordinates.
Each is the torch function of the same name, so results are torch's to the last bit.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from modelforge.config_types import check_type
from modelforge.errors import ConfigError
from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS


def _number(value: float | None, name: str) -> float | None:
    check_type(value, float | None, name)
    return value


class _Unary(nn.Module):
    """One torch function of one tensor."""

    function: Callable[[Tensor], Tensor] = torch.exp

    def __init__(self) -> None:  # of its own, so that an argument it does not take is named as such
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return type(self).function(x)


@BLOCKS.register("exp")
@counts_from_children
class Exp(_Unary):
    """e to the power of the input (torch.exp)."""

    function = torch.exp


@BLOCKS.register("log")
@counts_from_children
class Log(_Unary):
    """The natural logarithm of the input (torch.log)."""

    function = torch.log


@BLOCKS.register("sqrt")
@counts_from_children
class Sqrt(_Unary):
    """The square root of the input (torch.sqrt)."""

    function = torch.sqrt


@BLOCKS.register("clamp")
@counts_from_children
class Clamp(nn.Module):
    """The input limited to [`min`, `max`] (torch.clamp); either bound may be left out (null)."""

    def __init__(self, min: float | None = None, max: float | None = None) -> None:  # noqa: A002 (torch's names)
        super().__init__()
        self.min, self.max = _number(min, "min"), _number(max, "max")
        if self.min is None and self.max is None:
            raise ConfigError("max", "clamp without min or max does nothing", hint="give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ConfigError("max", f"max {self.max} is below min {self.min}")

    def forward(self, x: Tensor) -> Tensor:
        return x.clamp(self.min, self.max)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in (("min", self.min), ("max", self.max)) if v is not None)


@BLOCKS.register("normalize")
@counts_from_children
class Normalize(nn.Module):
    """The input divided by its `p`-norm (L2 by default) along `dim`, at least `eps` (F.normalize)."""

    dim_args = ("dim",)

    def __init__(self, dim: int = -1, p: float = 2.0, eps: float = 1e-12) -> None:
        super().__init__()
        check_type(dim, int, "dim")
        self.dim, self.p, self.eps = dim, _number(p, "p"), _number(eps, "eps")

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(x, p=self.p, dim=self.dim, eps=self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, p={self.p}, eps={self.eps}"
