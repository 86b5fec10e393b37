"""``grad_clip``: clamp each gradient element of chosen layers' parameters to [-value, value].

A tensor hook (``param.register_hook``) on every trainable parameter of the
targeted modules (default: every module owning parameters, i.e. the whole model)
clamps the gradient as backward produces it. How this differs from Lightning's
``trainer.gradient_clip_val``, which stays available and can be combined:

- Lightning clips once per optimizer step, after all backward passes of the step,
  on the accumulated and (under AMP) unscaled gradients of all parameters; by
  default it rescales the total gradient norm (``gradient_clip_algorithm="norm"``).
- This plugin clamps element-wise, only on the chosen layers, during each
  backward: with gradient accumulation it clamps every micro-batch's gradient,
  and under DDP each rank's gradient before the all-reduce.
- Under float16 mixed precision the hook would see gradients multiplied by the
  GradScaler's scale, so the bound would mean nothing: that combination is
  refused (bf16 needs no scaler and is fine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from modelforge.errors import ConfigError
from modelforge.hooks.base import SCALED_PRECISIONS, HookPlugin, PluginOptions
from modelforge.hooks.targets import Target
from modelforge.registry import HOOKS


@dataclass
class GradClipOptions(PluginOptions):
    """Options of ``hooks.grad_clip``: gradients are clamped to ``[-value, value]``."""

    value: float = 1.0

    def check(self, path: str) -> None:
        super().check(path)
        if not (math.isfinite(self.value) and self.value > 0):
            raise ConfigError(f"{path}.value", f"must be a positive number, got {self.value}", allowed="numbers > 0")


@HOOKS.register("grad_clip", schema=GradClipOptions)
class GradClip(HookPlugin):
    """Clamp each gradient element of the chosen layers' parameters to [-value, value]."""

    name = "grad_clip"
    Options = GradClipOptions
    default_targets = "with_params"
    needs_params = True

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        seen: set[int] = set()  # a parameter shared by two targets is clamped once
        for target in targets:
            for param in target.module.parameters():
                if param.requires_grad and id(param) not in seen:
                    seen.add(id(param))
                    handles.append(param.register_hook(self._clamp))

    def _clamp(self, grad: Tensor) -> Tensor:
        value = self.options.value
        return grad.clamp(-value, value)

    def check_precision(self, precision: str) -> None:
        if str(precision) in SCALED_PRECISIONS:
            raise ConfigError(
                self.path,
                f"cannot clamp gradients under trainer.precision={precision}: the GradScaler's scaled "
                "gradients reach the hook, so the bound would not hold on the real gradients",
                hint="use trainer.precision=bf16-mixed or 32-true, or Lightning's norm clipping "
                     "trainer.gradient_clip_val=<max norm> (applied after unscaling)",
            )
