"""Plain ``nn.Module`` building blocks: activations, blocks, initializers.

Importing this package registers the built-in names.
"""

from modelforge.layers.activations import make_activation
from modelforge.layers.blocks import Add, Concat, ConvBlock, LinearBlock, Pool
from modelforge.layers.initializers import initialize, make_init_fn, make_initializer
from modelforge.layers.tensor_ops import (
    Chunk,
    ClassToken,
    PositionEmbedding,
    Select,
    Split,
    Transpose,
)

__all__ = [
    "Add",
    "Chunk",
    "ClassToken",
    "Concat",
    "ConvBlock",
    "LinearBlock",
    "Pool",
    "PositionEmbedding",
    "Select",
    "Split",
    "Transpose",
    "initialize",
    "make_activation",
    "make_init_fn",
    "make_initializer",
]
