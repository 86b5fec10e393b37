"""``verbose``: log each targeted module's name, type and output shape for the first calls of a run.

One line per module and call, through the ``modelforge.hooks.verbose`` logger
at INFO, e.g. ``encoder.0  ConvBlock  -> [2, 32, 28, 28]``. Default targets:
every leaf module. Calls are counted over the plugin's life, i.e. once per run
(a run builds its plugins once): the first ``max_calls`` forwards are logged,
then each hook removes itself, so later batches, and the test stage after
training, pay nothing. In a Lightning run the sanity-check validation batch is
skipped, so a training run logs its first *training* batch (``eval``: its first
test batch), under a header naming the stage. In a distributed run only rank zero logs.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.hooks.base import HookPlugin, PluginOptions, require_at_least
from modelforge.hooks.targets import Target
from modelforge.models.shapes import describe_output
from modelforge.registry import HOOKS

log = logging.getLogger(__name__)

SKIPPED_STAGES = ("sanity_check",)  # Lightning's pre-training validation batch: not what the run trains on


@dataclass
class VerboseOptions(PluginOptions):
    """Options of ``hooks.verbose``: ``max_calls`` forward calls are logged per run (1 = the first batch)."""

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
    """Log each layer's name, type and output shape for the first forward calls of a run."""

    name = "verbose"
    Options = VerboseOptions
    default_targets = "leaves"

    def __init__(self, options: VerboseOptions | None = None, *, path: str | None = None) -> None:
        super().__init__(options, path=path)
        self._calls: defaultdict[str, int] = defaultdict(int)  # per layer, over the plugin's life
        self._headers: set[tuple[str | None, int]] = set()
        self.logged_stages: list[str | None] = []  # the stage of each logged call, e.g. ["train"]

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        names = [t.name or "(model)" for t in targets]
        # Aligned columns: the lines of one forward read as a table.
        widths = (max(map(len, names)), max(len(type(t.module).__name__) for t in targets))
        for name, target in zip(names, targets):
            if self._calls[name] >= self.options.max_calls:
                continue  # already logged in this run (e.g. in fit, now attached for test)
            state: dict[str, Any] = {}
            state["handle"] = target.module.register_forward_hook(functools.partial(self._log, name, state, widths))
            handles.append(state["handle"])

    def _log(self, name: str, state: dict[str, Any], widths: tuple[int, int],
             module: nn.Module, inputs: Any, output: Any) -> None:
        if self.stage in SKIPPED_STAGES:
            return
        call = self._calls[name]
        self._calls[name] += 1
        if is_rank_zero():
            if (self.stage, call) not in self._headers and self.stage is not None:
                self._headers.add((self.stage, call))
                self.logged_stages.append(self.stage)
                log.info("output shapes of the %s stage's batch %d of this run:", self.stage, call + 1)
            log.info("%s  %s  -> %s", name.ljust(widths[0]), type(module).__name__.ljust(widths[1]),
                     describe_output(output))
        if self._calls[name] >= self.options.max_calls:
            state["handle"].remove()  # done: later forwards run without this hook
