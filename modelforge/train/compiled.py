"""``compile=true``: the model compiled for the training step, in a known, bounded number of graphs, and what it cost.

Why a run used to compile without end: every kind of call was a graph of its own (training, the sanity check and
validation under ``inference_mode``, the test, and each of them again at the ragged last batch), each compiled
before that call could run, with nothing printed while it did. Here only training steps are compiled: validation
and test run the same module eagerly (``force_eager``: no graph, no recompile), and the ragged last training batch
costs one more graph, with the batch dimension dynamic from then on (torch's automatic dynamic shapes), so a
run compiles 1 or 2 graphs (a hook plugin that breaks the graph adds its pieces). ``recompile_limit`` bounds the
rest: past it torch runs that call eagerly instead of compiling again.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from modelforge.errors import ConfigError, UnknownNameError

RECOMPILE_LIMIT = 4  # graphs per compiled call: full batch, ragged last batch, and room for a plugin's graph break
# torch.compile backends a run may name: inductor generates code; the others check what dynamo captures.
BACKENDS = ("inductor", "aot_eager", "eager", "cudagraphs")
log = logging.getLogger(__name__)


def check_compile_options(backend: str, mode: str | None) -> None:
    """``compile_backend`` among :data:`BACKENDS`; ``compile_mode`` one of inductor's modes, and only for inductor."""
    if backend not in BACKENDS:
        raise UnknownNameError("compile backend", backend, BACKENDS, path="compile_backend")
    if mode is None:
        return
    from torch._inductor import list_mode_options

    if backend != "inductor":
        raise ConfigError("compile_mode", f"{mode!r} is a mode of the inductor backend, not of {backend!r}",
                          hint="leave compile_mode unset, or compile_backend=inductor")
    if mode not in (modes := list(list_mode_options())):
        raise UnknownNameError("compile mode", mode, modes, path="compile_mode")


def check_compile(enabled: bool, backend: str, mode: str | None, accelerator: str) -> None:
    """A run's ``compile`` (``enabled``), ``compile_backend`` and ``compile_mode`` (typed by TrainConfig) on its
    resolved ``trainer.accelerator``, before any work: names torch has; the ``cudagraphs`` backend only on a CUDA GPU
    (elsewhere it captures nothing, and torch prints a warning block per graph); and, for ``compile=true`` with
    inductor, the compilers its generated code needs."""
    check_compile_options(backend, mode)
    if not enabled:
        return
    if backend == "cudagraphs" and accelerator != "gpu":
        raise ConfigError("compile_backend", f"'cudagraphs' captures CUDA graphs, and this run trains on {accelerator}",
                          allowed=[b for b in BACKENDS if b != "cudagraphs"],
                          hint="compile_backend=inductor (the default) compiles for any device")
    if backend == "inductor":
        check_compilers(accelerator)


@dataclass(frozen=True)
class CompilePlan:
    """A run's ``compile`` (``enabled``), ``compile_backend`` and ``compile_mode`` on its resolved accelerator,
    checked when made (:func:`check_compile`): what the module compiles its training step with."""

    enabled: bool = False
    backend: str = "inductor"
    mode: str | None = None
    accelerator: str = "cpu"

    def __post_init__(self) -> None:
        check_compile(self.enabled, self.backend, self.mode, self.accelerator)


def check_compilers(accelerator: str) -> None:
    """Inductor builds C++ (and, on a GPU, Triton builds C launchers) while the first step runs: a missing compiler
    there is a traceback minutes in. Probed now with torch's and Triton's own lookups (``g++ --version``: ms)."""
    from torch._inductor import cpp_builder, exc

    way_out = "compile=false trains the same model uncompiled"
    try:
        cpp_builder.get_cpp_compiler()
    except (exc.InvalidCxxCompiler, OSError) as error:
        from torch._inductor import config as inductor_config

        searched = [c for c in inductor_config.cpp.cxx if c] if isinstance(inductor_config.cpp.cxx, (list, tuple)) \
            else [inductor_config.cpp.cxx]
        raise ConfigError("compile", f"torch.compile's inductor backend needs a C++ compiler, and none runs here "
                          f"(searched: {', '.join(map(str, searched))} on PATH; {error})",
                          hint=f"{way_out}; or install g++, or name one in the CXX environment variable") from None
    if accelerator == "gpu":
        get_cc = getattr(_optional_module("triton.runtime.build"), "get_cc", None)
        try:
            get_cc() if get_cc is not None else None
        except RuntimeError as error:
            raise ConfigError("compile", f"Triton, which inductor uses on a GPU, needs a C compiler: {error}",
                              hint=f"{way_out}; or install gcc, or name one in the CC environment variable") from None


def _optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def compile_for_training(model: nn.Module, backend: str = "inductor", mode: str | None = None) -> None:
    """Compile ``model`` in place (``nn.Module.compile``: state_dict keys unchanged), hooks attached so far included."""
    model.compile(backend=backend, mode=mode, recompile_limit=RECOMPILE_LIMIT)


@contextlib.contextmanager
def eagerly() -> Iterator[None]:
    """Run compiled modules eagerly inside the block: evaluation compiles nothing."""
    with torch.compiler.set_stance("force_eager"):
        yield


@dataclass
class CompileCost:
    """Graphs compiled and seconds spent compiling in this process since :meth:`start` (dynamo's own counters)."""

    graphs_before: int = 0
    seconds_before: float = 0.0

    @staticmethod
    def _now() -> tuple[int, float]:
        from torch._dynamo.utils import calculate_time_spent, counters

        return int(counters["stats"]["unique_graphs"]), float(calculate_time_spent().get("total_wall_time", 0.0))

    def start(self) -> CompileCost:
        self.graphs_before, self.seconds_before = self._now()
        return self

    def record(self) -> dict[str, float | int]:
        """For metrics.json: ``{"graphs": N, "seconds": S}`` since :meth:`start`."""
        graphs, seconds = self._now()
        return {"graphs": graphs - self.graphs_before, "seconds": round(seconds - self.seconds_before, 2)}
