"""A learnable tensor as a graph node: ConvNeXt's layer scale, a gate, a bias of one's own.

The node reads no input (``inputs: []``) and returns its parameter, which an element-wise node
combines with a feature map, broadcasting: ``{block: parameter, args: {shape: [C, 1, 1], init:
{name: constant, val: 1.0e-6}}, inputs: []}`` then ``{block: mul, inputs: [gamma, x]}``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from modelforge.errors import ConfigError
from modelforge.layers.initializers import make_initializer
from modelforge.layers.macs import counts_from_children
from modelforge.registry import BLOCKS


@BLOCKS.register("parameter")
@counts_from_children
class LearnedTensor(nn.Module):
    """A learnable tensor of `shape`, filled by `init` (zeros unless told); reads no input (inputs: []).

    ``init`` is an initializer: ``ones``, ``{name: constant, val: 1.0e-6}``, ``{name: trunc_normal, std: 0.02}``.
    """

    def __init__(self, shape: list[int], init: Any = "zeros") -> None:
        super().__init__()
        sizes = [shape] if isinstance(shape, int) else list(shape)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
            raise ConfigError("shape", f"cannot make a tensor of shape {shape!r}", allowed="a list of sizes >= 1")
        self.weight = nn.Parameter(torch.empty(sizes))
        self._fill = make_initializer(init, "init")  # None for `default`: zeros
        self._init = init
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Fill the tensor by its init (torch's convention: also after ``to_empty`` of a module built on meta)."""
        with torch.no_grad():
            self.weight.zero_()
            if self._fill is not None:
                self._fill(self.weight)

    def forward(self) -> Tensor:
        return self.weight

    def extra_repr(self) -> str:
        return f"shape={list(self.weight.shape)}, init={self._init}"
