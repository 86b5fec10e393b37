"""Stochastic depth (Huang et al. 2016, "Deep Networks with Stochastic Depth"): in training, a residual
branch is dropped for a random part of the batch, and the rest is scaled by ``1 / (1 - p)``.

As torchvision's ``StochasticDepth`` (``ops/stochastic_depth.py``) does it, so that EfficientNet and
ConvNeXt written in YAML train as torchvision's do: one Bernoulli draw per sample (``row``) or one for
the whole batch (``batch``), nothing drawn when ``p`` is 0 or in eval mode; the same draws, in the same
order, from the same seed.
"""

from __future__ import annotations

from torch import Tensor, nn

from modelforge.config_types import fits
from modelforge.errors import ConfigError, closest_names
from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS

MODES = ("row", "batch")


@BLOCKS.register("stochastic_depth")
@counts_from_children
class StochasticDepth(nn.Module):
    """In training, zero the input with probability `p` per sample (mode row) or per batch (batch), the rest times 1/(1-p)

    The identity in eval mode and at p = 0.
    """

    def __init__(self, p: float, mode: str = "row") -> None:
        super().__init__()
        if not fits(p, float, "p") or not 0.0 <= p <= 1.0:
            raise ConfigError("p", f"a drop probability is between 0 and 1, got {p!r}")
        if mode not in MODES:
            raise ConfigError("mode", f"unknown mode {mode!r}", allowed=MODES, suggestions=closest_names(str(mode), MODES))
        self.p, self.mode = float(p), mode

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        size = [x.shape[0]] + [1] * (x.dim() - 1) if self.mode == "row" else [1] * x.dim()
        noise = x.new_empty(size).bernoulli_(keep)
        if keep > 0.0:
            noise.div_(keep)
        return x * noise

    def extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode}"
