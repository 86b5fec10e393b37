"""modelforge: describe a PyTorch model in YAML, build it through registries.

``import modelforge`` itself imports nothing heavy, so that ``python -m modelforge --help`` starts without torch.
The first public name asked for (PEP 562 ``__getattr__``) registers every built-in name (activations, blocks,
initializers, models, hooks, optimizers, schedules) through the explicit imports of
:func:`modelforge.registry.load_builtins`, as does a registry's first lookup. Lightning is never imported here:
building a model needs torch, omegaconf and nothing else.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ gives, for type checkers and IDEs
    from modelforge.build import (build_model, compose_model_config, create_model, model_config_from_run,
                                  validate_model_config)
    from modelforge.deploy.load import load_model
    from modelforge.errors import CheckpointError, ConfigError, DataError, ModelforgeError, UnknownNameError
    from modelforge.hooks import build_hook_plugins
    from modelforge.inspect.summary import format_summary, summarize
    from modelforge.layers import ConvBlock, LinearBlock, initialize, make_activation
    from modelforge.registry import (ACTIVATIONS, BLOCKS, CALLBACKS, DATAMODULES, HOOKS, INITIALIZERS, LOGGERS,
                                     MODELS, OPTIMIZERS, REGISTRIES, SCHEDULERS, Registry)

__version__ = "0.1.0"

# public name -> the module that defines it
_HOMES = {
    **dict.fromkeys(["build_model", "compose_model_config", "create_model", "model_config_from_run",
                     "validate_model_config"],
                    "modelforge.build"),
    "load_model": "modelforge.deploy.load",
    **dict.fromkeys(["CheckpointError", "ConfigError", "DataError", "ModelforgeError", "UnknownNameError"],
                    "modelforge.errors"),
    "build_hook_plugins": "modelforge.hooks",
    **dict.fromkeys(["format_summary", "summarize"], "modelforge.inspect.summary"),
    **dict.fromkeys(["ConvBlock", "LinearBlock", "initialize", "make_activation"], "modelforge.layers"),
    **dict.fromkeys(["ACTIVATIONS", "BLOCKS", "CALLBACKS", "DATAMODULES", "HOOKS", "INITIALIZERS", "LOGGERS",
                     "MODELS", "OPTIMIZERS", "REGISTRIES", "SCHEDULERS", "Registry"], "modelforge.registry"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    """A public name or a subpackage (``modelforge.models``), imported on first use, with every built-in name
    registered first."""
    if name not in _HOMES and (name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from modelforge.registry import load_builtins

    load_builtins()
    value = getattr(importlib.import_module(_HOMES[name]), name) if name in _HOMES else importlib.import_module(
        f"{__name__}.{name}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
