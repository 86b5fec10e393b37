"""Plain ``nn.Module`` building blocks: activations, blocks, initializers.

Importing this package registers the built-in names.
"""

from modelforge.layers.activations import make_activation
from modelforge.layers.arithmetic import Div, MatMul, Mul, Sub
from modelforge.layers.blocks import Add, Concat, ConvBlock, LinearBlock, Pool
from modelforge.layers.initializers import initialize, make_init_fn, make_initializer
from modelforge.layers.learned import LearnedTensor
from modelforge.layers.stochastic_depth import StochasticDepth
from modelforge.layers.tensor_ops import (
    Chunk,
    ClassToken,
    Mean,
    Permute,
    PositionEmbedding,
    Reshape,
    Select,
    Softmax,
    Split,
    Transpose,
)

__all__ = [
    "Add",
    "Chunk",
    "ClassToken",
    "Concat",
    "ConvBlock",
    "Div",
    "LearnedTensor",
    "LinearBlock",
    "MatMul",
    "Mean",
    "Mul",
    "Permute",
    "Pool",
    "PositionEmbedding",
    "Reshape",
    "Select",
    "Softmax",
    "Split",
    "StochasticDepth",
    "Sub",
    "Transpose",
    "initialize",
    "make_activation",
    "make_init_fn",
    "make_initializer",
]
