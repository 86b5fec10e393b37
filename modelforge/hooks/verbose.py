"""``verbose``: log each targeted module's name, type and output shape for the first calls.

One line per module and call, through the ``modelforge.hooks.verbose`` logger
at INFO, e.g. ``encoder.0  ConvBlock  -> [2, 32, 28, 28]``. Default targets:
every leaf module. Each module's hook removes itself after ``max_calls`` calls
(counted from each attach), so later batches pay nothing. In a distributed run
only rank zero logs.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.hooks.base import HookPlugin, PluginOptions, require_at_least
from modelforge.hooks.targets import Target
from modelforge.registry import HOOKS
from modelforge.summary import describe_output

log = logging.getLogger(__name__)


@dataclass
class VerboseOptions(PluginOptions):
    """Options of ``hooks.verbose``: ``max_calls`` forward calls are logged (1 = the first batch)."""

    max_calls: int = 1

    def check(self, path: str) -> None:
        super().check(path)
        require_at_least(self.max_calls, 1, f"{path}.max_calls")


def is_rank_zero() -> bool:
    """False only on the non-zero ranks of an initialized distributed run."""
    dist = torch.distributed
    return not (dist.is_available() and dist.is_initialized() and dist.get_rank() != 0)


@HOOKS.register("verbose", schema=VerboseOptions)
class Verbose(HookPlugin):
    """Log each layer's name, type and output shape for the first forward calls."""

    name = "verbose"
    Options = VerboseOptions
    default_targets = "leaves"

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        names = [t.name or "(model)" for t in targets]
        # Aligned columns: the lines of one forward read as a table.
        widths = (max(map(len, names)), max(len(type(t.module).__name__) for t in targets))
        for name, target in zip(names, targets):
            state: dict[str, Any] = {"calls": 0}
            state["handle"] = target.module.register_forward_hook(functools.partial(self._log, name, state, widths))
            handles.append(state["handle"])

    def _log(self, name: str, state: dict[str, Any], widths: tuple[int, int],
             module: nn.Module, inputs: Any, output: Any) -> None:
        state["calls"] += 1
        if is_rank_zero():
            log.info("%s  %s  -> %s", name.ljust(widths[0]), type(module).__name__.ljust(widths[1]),
                     describe_output(output))
        if state["calls"] >= self.options.max_calls:
            state["handle"].remove()  # done: later forwards run without this hook
