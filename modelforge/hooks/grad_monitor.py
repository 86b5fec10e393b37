"""``grad_monitor``: per-layer gradient norms at every backward, with exploding/vanishing warnings.

A layer's norm is ``torch.linalg.vector_norm`` over all gradients of its
trainable parameters (default layers: every module owning parameters, i.e.
Conv2d, Linear, BatchNorm2d...). One multi-grad hook over all targeted
parameters fires once per backward, when every gradient is ready, and reads them
as they come out of earlier tensor hooks (``grad_clip`` listed first clamps
first); the norms are those of this backward, before accumulation into ``.grad``.
Reading them costs one device sync per backward.

Exposed as ``plugin.norms`` (layer -> latest float) and ``plugin.history(layer)``
(the last ``history`` (step, norm) pairs); written to the Lightning logger as
``grad_norm/<layer>`` every ``log_every`` steps; a norm above ``max_norm`` (or not
finite) is logged as a warning at once, one that stays below ``min_norm`` for
``vanish_steps`` backward passes in a row as vanishing; at most one warning per
layer per ``warn_every`` steps. Steps are the trainer's global step when the training
callback attached the plugin, else the number of backward passes seen.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from modelforge.errors import ConfigError
from modelforge.hooks.base import (
    SCALED_PRECISIONS,
    HookPlugin,
    PluginOptions,
    require_at_least,
)
from modelforge.hooks.targets import Target
from modelforge.registry import HOOKS

log = logging.getLogger(__name__)


@dataclass
class GradMonitorOptions(PluginOptions):
    """Options of ``hooks.grad_monitor``; a null ``max_norm``/``min_norm`` turns that warning off."""

    max_norm: float | None = 1000.0
    min_norm: float | None = 1.0e-7
    vanish_steps: int = 10
    warn_every: int = 100
    log_every: int = 50
    history: int = 100

    def check(self, path: str) -> None:
        super().check(path)
        if self.max_norm is not None and not self.max_norm > 0:
            raise ConfigError(f"{path}.max_norm", f"must be positive or null, got {self.max_norm}")
        if self.min_norm is not None:
            require_at_least(self.min_norm, 0, f"{path}.min_norm")
        if self.max_norm is not None and self.min_norm is not None and self.min_norm >= self.max_norm:
            raise ConfigError(f"{path}.min_norm", f"must be below max_norm={self.max_norm}, got {self.min_norm}")
        for key in ("vanish_steps", "warn_every", "log_every", "history"):
            require_at_least(getattr(self, key), 1, f"{path}.{key}")


@HOOKS.register("grad_monitor", schema=GradMonitorOptions)
class GradMonitor(HookPlugin):
    """Record per-layer gradient norms each backward; log them and warn when they explode or vanish."""

    name = "grad_monitor"
    Options = GradMonitorOptions
    default_targets = "with_params"
    needs_params = True

    def __init__(self, options: GradMonitorOptions | None = None, *, path: str | None = None) -> None:
        super().__init__(options, path=path)
        self.norms: dict[str, float] = {}
        self._history: dict[str, deque[tuple[int, float]]] = {}
        self._last_warned: dict[str, int] = {}
        self._below_min: dict[str, int] = {}  # backward passes in a row under min_norm, per layer
        self._backwards = 0

    def history(self, name: str) -> list[tuple[int, float]]:
        """The last ``history`` (step, norm) pairs of layer ``name``, oldest first."""
        return list(self._history.get(name, ()))

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        tensors: list[Tensor] = []
        index: dict[int, int] = {}  # a parameter shared by two layers appears once in the hook's list
        layers: dict[str, list[int]] = {}
        for target in targets:
            positions = []
            for p in target.module.parameters():
                if p.requires_grad:
                    if id(p) not in index:
                        index[id(p)] = len(tensors)
                        tensors.append(p)
                    positions.append(index[id(p)])
            layers[target.name or "model"] = positions
        hook = functools.partial(self._record, layers, logger)
        handles.append(torch.autograd.graph.register_multi_grad_hook(tensors, hook, mode="all"))

    def _record(self, layers: dict[str, list[int]], logger: Any, grads: list[Tensor | None]) -> None:
        step = self.step if self.step is not None else self._backwards
        self._backwards += 1
        names, norms = [], []
        for name, indices in layers.items():
            present = [grads[i] for i in indices if grads[i] is not None]
            if present:  # a layer this backward did not reach has no norm this time
                names.append(name)
                norms.append(torch.linalg.vector_norm(
                    torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in present])))
        if not names:
            return
        values = torch.stack(norms).tolist()  # one device sync for all layers
        for name, value in zip(names, values):
            self.norms[name] = value
            self._history.setdefault(name, deque(maxlen=self.options.history)).append((step, value))
            self._maybe_warn(name, value, step)
        if logger and step % self.options.log_every == 0:
            logger.log_metrics({f"grad_norm/{n}": v for n, v in zip(names, values)}, step=step)

    def check_precision(self, precision: str) -> None:
        if precision in SCALED_PRECISIONS:  # still useful for relative trends, so a warning, not an error
            log.warning("%s: under trainer.precision=%s the norms are of gradients multiplied by the "
                        "GradScaler's loss scale", self.path, precision)

    def _maybe_warn(self, name: str, value: float, step: int) -> None:
        opts = self.options
        # One tiny norm is noise (a ReLU layer with no active unit on one batch); vanishing is one that stays.
        if opts.min_norm is not None and value < opts.min_norm:
            self._below_min[name] = self._below_min.get(name, 0) + 1
        else:
            self._below_min.pop(name, None)
        if opts.max_norm is not None and not (math.isfinite(value) and value <= opts.max_norm):
            problem = f"exploding: {value:.4g} > max_norm={opts.max_norm:g}"
        elif self._below_min.get(name, 0) >= opts.vanish_steps:
            problem = (f"vanishing: {value:.4g} < min_norm={opts.min_norm:g} "
                       f"for {self._below_min[name]} backward passes in a row")
        else:
            return
        last = self._last_warned.get(name)
        if last is None or step < last or step - last >= opts.warn_every:  # step < last: a new run
            self._last_warned[name] = step
            log.warning("gradient norm of %s at step %d is %s", name, step, problem)
