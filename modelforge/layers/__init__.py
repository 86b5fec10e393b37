"""Plain ``nn.Module`` building blocks: activations, blocks, initializers.

Importing this package registers the built-in names.
"""

from modelforge.layers.activations import make_activation
from modelforge.layers.blocks import Add, Concat, ConvBlock, LinearBlock, Pool
from modelforge.layers.initializers import initialize, make_init_fn, make_initializer

__all__ = [
    "Add",
    "Concat",
    "ConvBlock",
    "LinearBlock",
    "Pool",
    "initialize",
    "make_activation",
    "make_init_fn",
    "make_initializer",
]
