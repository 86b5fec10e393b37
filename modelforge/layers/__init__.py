"""Plain ``nn.Module`` building blocks: activations, blocks, initializers.

Importing this package registers the built-in names.
"""

from modelforge.layers.activations import make_activation
from modelforge.layers.arithmetic import Add, Compare, Div, MaskedFill, MatMul, Mul, Neg, Sub
from modelforge.layers.blocks import Concat, ConvBlock, LinearBlock, Pool
from modelforge.layers.constants import Constant, Take
from modelforge.layers.initializers import initialize, make_init_fn, make_initializer
from modelforge.layers.learned import LearnedTensor
from modelforge.layers.math_ops import Clamp, Exp, Log, Normalize, Sqrt
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
    Sum,
    Transpose,
    Unbind,
)
from modelforge.layers.window_ops import PadToMultiple, Roll, Slice

__all__ = [
    "Add",
    "Chunk",
    "Clamp",
    "ClassToken",
    "Compare",
    "Concat",
    "Constant",
    "ConvBlock",
    "Div",
    "Exp",
    "LearnedTensor",
    "LinearBlock",
    "Log",
    "MaskedFill",
    "MatMul",
    "Mean",
    "Mul",
    "Neg",
    "Normalize",
    "PadToMultiple",
    "Permute",
    "Pool",
    "PositionEmbedding",
    "Reshape",
    "Roll",
    "Select",
    "Slice",
    "Softmax",
    "Split",
    "Sqrt",
    "StochasticDepth",
    "Sub",
    "Sum",
    "Take",
    "Transpose",
    "Unbind",
    "initialize",
    "make_activation",
    "make_init_fn",
    "make_initializer",
]
