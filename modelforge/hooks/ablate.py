"""``ablate``: forward hooks that return a modified output, knocking out chosen channels or units.

For each targeted layer, the hook replaces channels (dimension 1 of the output:
conv channels of ``[N, C, H, W]``, units of ``[N, F]``) by zero (``mode: zero``)
or by their mean over the batch and every other dimension (``mode: mean``,
the usual "mean ablation", which keeps the layer's average signal and removes
only what varies with the input). ``channels: all`` ablates the whole output.
The hook returns a new tensor, so the original output (and autograd through the
untouched channels) is left as it was. It runs in every stage (train, val,
test, ``eval``): ``python -m modelforge eval ckpt_path=... hooks=[ablate]
hooks.ablate.layers=[encoder.1] hooks.ablate.channels=[0,3]`` is an ablation
study in one command. There is no default target: ``layers`` must be named.

torch.compile: attached before compiling (as the training callback does),
dynamo traces the hook into the graph, so the compiled model ablates too.
DDP: hooks run on each rank's replica; every rank ablates its own batch, and
with ``mode: mean`` the mean is that rank's batch mean (not a global one).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from modelforge.errors import ConfigError
from modelforge.hooks.base import HookPlugin, PluginOptions
from modelforge.hooks.targets import Target
from modelforge.registry import HOOKS


@dataclass
class AblateOptions(PluginOptions):
    """Options of ``hooks.ablate``: which channels (dim 1) of the ``layers`` outputs to knock out, and how."""

    channels: list[int] | Literal["all"] = "all"
    mode: Literal["zero", "mean"] = "zero"

    def check(self, path: str) -> None:
        super().check(path)
        if self.layers is None:
            raise ConfigError(f"{path}.layers", "must name the layers to ablate",
                              hint=f"e.g. {path}.layers=[encoder.1]; `python -m modelforge summary` lists the names")
        if self.channels != "all":
            if not self.channels:
                raise ConfigError(f"{path}.channels", "is empty: nothing would be ablated",
                                  allowed="a list of channel indices like [0,3], or all")
            for i, c in enumerate(self.channels):
                if c < 0:
                    raise ConfigError(f"{path}.channels[{i}]", f"must be >= 0, got {c}")


@HOOKS.register("ablate", schema=AblateOptions)
class Ablate(HookPlugin):
    """Zero (or mean-replace) chosen channels of chosen layers' outputs in every forward."""

    name = "ablate"
    Options = AblateOptions

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        for target in targets:
            handles.append(target.module.register_forward_hook(functools.partial(self._ablate, target.name)))

    def _ablate(self, name: str, module: nn.Module, inputs: Any, output: Any) -> Tensor:
        if not isinstance(output, Tensor) or output.dim() < 2:
            raise ConfigError(f"{self.path}.layers", f"{name!r} returns {type(output).__name__} "
                              f"{list(getattr(output, 'shape', []))}: ablate needs a tensor with channels "
                              "in dimension 1", hint="choose a conv or linear layer or block")
        opts = self.options
        if opts.channels == "all":
            mask = torch.ones(output.shape[1], dtype=torch.bool, device=output.device)
        else:
            too_big = [c for c in opts.channels if c >= output.shape[1]]
            if too_big:
                raise ConfigError(f"{self.path}.channels", f"{too_big} out of range for {name!r}, "
                                  f"which has {output.shape[1]} channels", allowed=f"0..{output.shape[1] - 1}")
            mask = torch.zeros(output.shape[1], dtype=torch.bool, device=output.device)
            mask[list(opts.channels)] = True
        mask = mask.view(1, -1, *([1] * (output.dim() - 2)))
        if opts.mode == "zero":
            replacement = torch.zeros((), dtype=output.dtype, device=output.device)
        else:
            dims = [d for d in range(output.dim()) if d != 1]
            replacement = output.mean(dim=dims, keepdim=True).expand_as(output)
        return torch.where(mask, replacement, output)
