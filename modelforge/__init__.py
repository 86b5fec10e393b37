"""modelforge: describe a PyTorch model in YAML, build it through registries."""

from modelforge.errors import ConfigError, DataError, ModelforgeError, UnknownNameError
from modelforge.registry import ACTIVATIONS, BLOCKS, HOOKS, INITIALIZERS, MODELS, REGISTRIES, Registry

__all__ = [
    "ACTIVATIONS",
    "BLOCKS",
    "HOOKS",
    "INITIALIZERS",
    "MODELS",
    "REGISTRIES",
    "ConfigError",
    "DataError",
    "ModelforgeError",
    "Registry",
    "UnknownNameError",
]
