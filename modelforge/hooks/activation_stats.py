"""``activation_stats``: mean, std and fraction of zeros of chosen layers' activations and their gradients.

A forward hook reads each targeted layer's output; when the output takes part
in autograd it also registers a **tensor hook on that activation**
(``output.register_hook``), which fires in backward with the gradient of the
loss with respect to the activation (not a parameter's gradient, which
``grad_clip``/``grad_monitor`` see). A high ``act_zeros`` on a ReLU is the share
of dead units in that batch. The tensor hook returns nothing, so gradients are
unchanged; it dies with the batch's graph.

Exposed as ``plugin.stats[layer]`` (``act_mean``, ``act_std``, ``act_zeros`` and,
after a backward, ``grad_mean``, ``grad_std``, ``grad_zeros``) and written to the
Lightning logger as ``act_mean/<layer>``, ``grad_std/<layer>``... for training
batches. Statistics are taken every ``log_every`` steps (the trainer's global
step when the training callback attached the plugin, else this layer's count of
forward calls), since each costs a device sync. Default targets: every leaf module.

torch.compile: attached before compiling, dynamo traces the forward hook; the
tensor hook on an intermediate activation is supported by dynamo too (tested with
``aot_eager``). DDP: every rank computes the statistics of its own
batch; only what rank 0 logs reaches the logs (Lightning's loggers are rank-zero).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.hooks.base import HookPlugin, PluginOptions, require_at_least
from modelforge.hooks.targets import Target
from modelforge.registry import HOOKS


@dataclass
class ActivationStatsOptions(PluginOptions):
    """Options of ``hooks.activation_stats``: statistics taken (and logged) every ``log_every`` steps."""

    log_every: int = 50

    def check(self, path: str) -> None:
        super().check(path)
        require_at_least(self.log_every, 1, f"{path}.log_every")


def tensor_stats(t: Tensor, prefix: str) -> dict[str, float]:
    """Mean, standard deviation and fraction of exact zeros of ``t`` (in float32), as floats."""
    t = t.detach().float()
    values = torch.stack([t.mean(), t.std(unbiased=False), (t == 0).float().mean()]).tolist()  # one sync
    return dict(zip((f"{prefix}_mean", f"{prefix}_std", f"{prefix}_zeros"), values))


@HOOKS.register("activation_stats", schema=ActivationStatsOptions)
class ActivationStats(HookPlugin):
    """Per-layer statistics of forward activations and of the gradients that flow back into them."""

    name = "activation_stats"
    Options = ActivationStatsOptions
    default_targets = "leaves"

    def __init__(self, options: ActivationStatsOptions | None = None, *, path: str | None = None) -> None:
        super().__init__(options, path=path)
        self.stats: dict[str, dict[str, float]] = {}
        self._calls: defaultdict[str, int] = defaultdict(int)

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        for target in targets:
            hook = functools.partial(self._forward, target.name or "model", logger)
            handles.append(target.module.register_forward_hook(hook))

    def _forward(self, name: str, logger: Any, module: nn.Module, inputs: Any, output: Any) -> None:
        step = self.step if self.step is not None else self._calls[name]
        self._calls[name] += 1
        if not isinstance(output, Tensor) or step % self.options.log_every:
            return
        self.stats[name] = tensor_stats(output, "act")
        log_it = logger is not None and module.training
        if log_it:
            logger.log_metrics({f"{k}/{name}": v for k, v in self.stats[name].items()}, step=step)
        if output.requires_grad:
            output.register_hook(functools.partial(self._backward, name, logger if log_it else None, step))

    def _backward(self, name: str, logger: Any, step: int, grad: Tensor) -> None:
        grad_stats = tensor_stats(grad, "grad")
        self.stats.setdefault(name, {}).update(grad_stats)
        if logger is not None:
            logger.log_metrics({f"{k}/{name}": v for k, v in grad_stats.items()}, step=step)
