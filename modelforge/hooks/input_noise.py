"""``input_noise``: a forward pre-hook that adds Gaussian noise to chosen layers' inputs.

The pre-hook returns a new input tuple ``(x + std * randn_like(x), *rest)``, so the
module computes on the perturbed tensor; only the first positional input is
changed. By default the noise is added only while the module is in training
mode (``module.training``): validation and test see clean inputs, as for
dropout. ``always: true`` perturbs in every mode, e.g. to measure how test
accuracy degrades with ``eval ... hooks=[input_noise] hooks.input_noise.always=true``.
Default target: the model itself (``layers: null``), i.e. its input images.

The noise comes from torch's global generator, so ``seed`` makes a run repeatable.
torch.compile: attached before compiling, dynamo traces the pre-hook (a branch
on ``module.training`` is a guard, so train and eval compile separately).
DDP: the hook runs on each rank's replica and perturbs that rank's batch. Every
rank is seeded with the same ``seed``, so the noise *draws* are alike across
ranks at a given step, but they are added to different images.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.errors import ConfigError
from modelforge.hooks.base import HookPlugin, PluginOptions
from modelforge.hooks.targets import Target
from modelforge.registry import HOOKS


@dataclass
class InputNoiseOptions(PluginOptions):
    """Options of ``hooks.input_noise``: noise of standard deviation ``std``, in training only unless ``always``."""

    std: float = 0.1
    always: bool = False

    def check(self, path: str) -> None:
        super().check(path)
        if not (math.isfinite(self.std) and self.std >= 0):
            raise ConfigError(f"{path}.std", f"must be a finite number >= 0, got {self.std}", allowed="numbers >= 0")


@HOOKS.register("input_noise", schema=InputNoiseOptions)
class InputNoise(HookPlugin):
    """Add Gaussian noise to the input of chosen layers (default: the model's input) before they run."""

    name = "input_noise"
    Options = InputNoiseOptions
    default_targets = "model"

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        for target in targets:
            handles.append(target.module.register_forward_pre_hook(functools.partial(self._perturb, target.name)))

    def _perturb(self, name: str, module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if not (self.options.always or module.training) or not args or not isinstance(args[0], torch.Tensor):
            return None  # None keeps the input as it was
        x = args[0]
        if not x.is_floating_point():
            return None
        return (x + self.options.std * torch.randn_like(x), *args[1:])
