"""How a block tells the MAC counter (:mod:`modelforge.inspect.flops`) that it needs no tracing.

A mark on the class, kept here with the blocks so that the layers and models that carry it do not
import the inspection layer above them.
"""

from __future__ import annotations

from typing import TypeVar

MACS_FROM_CHILDREN = "_macs_from_children"  # the class attribute the counter reads (its own, not inherited)
# A block that multiplies matrices itself defines ``own_macs(self, inputs, output) -> int``, its MACs of one
# call (all samples): the counter then counts it by that formula, without ``FlopCounterMode``.
OWN_MACS = "own_macs"
# A graph node whose inputs have no batch dimension (a position-bias MLP on a ``constant``) carries this attribute
# (True): its work is the same whatever the batch, so its MACs per sample are those of one call.
BATCH_FREE = "batch_free"
T = TypeVar("T", bound=type)


def counts_from_children(cls: T) -> T:
    """Class decorator: this module's forward only calls its children and element-wise ops, so its MACs
    are its children's (the counter then counts it from forward hooks, without ``FlopCounterMode``)."""
    setattr(cls, MACS_FROM_CHILDREN, True)
    return cls
