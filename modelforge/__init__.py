"""modelforge: describe a PyTorch model in YAML, build it through registries.

Importing modelforge registers every built-in name (activations, blocks,
initializers, models, hooks, optimizers, schedules) through the explicit imports below, and never
imports Lightning: building a model needs torch, omegaconf and nothing else.
"""

from modelforge import hooks, layers, models  # noqa: F401 - these imports register the built-ins
from modelforge.build import (
    build_model,
    compose_model_config,
    create_model,
    model_config_from_run,
    validate_model_config,
)
from modelforge.data import options  # noqa: F401 - gives Hydra the data defaults (data_defaults/<name>)
from modelforge.deploy.load import load_model
from modelforge.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    ModelforgeError,
    UnknownNameError,
)
from modelforge.hooks import build_hook_plugins
from modelforge.inspect.summary import format_summary, summarize
from modelforge.layers import ConvBlock, LinearBlock, initialize, make_activation
from modelforge.registry import (
    ACTIVATIONS,
    BLOCKS,
    CALLBACKS,
    DATAMODULES,
    HOOKS,
    INITIALIZERS,
    LOGGERS,
    MODELS,
    OPTIMIZERS,
    REGISTRIES,
    SCHEDULERS,
    Registry,
)
from modelforge.train import optim  # noqa: F401 - registers the optimizers and schedules (no Lightning import)

__version__ = "0.1.0"

__all__ = [
    "ACTIVATIONS",
    "BLOCKS",
    "CALLBACKS",
    "DATAMODULES",
    "HOOKS",
    "INITIALIZERS",
    "LOGGERS",
    "MODELS",
    "OPTIMIZERS",
    "REGISTRIES",
    "SCHEDULERS",
    "CheckpointError",
    "ConfigError",
    "ConvBlock",
    "DataError",
    "LinearBlock",
    "ModelforgeError",
    "Registry",
    "UnknownNameError",
    "build_hook_plugins",
    "build_model",
    "compose_model_config",
    "create_model",
    "format_summary",
    "initialize",
    "load_model",
    "make_activation",
    "model_config_from_run",
    "summarize",
    "validate_model_config",
]
