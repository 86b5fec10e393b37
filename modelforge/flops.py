"""Multiply-accumulates (MACs) of a model's forward pass, counted by torch's own ``FlopCounterMode``.

``torch.utils.flop_counter`` counts the FLOPs of matrix products: convolutions
(``aten.convolution``), ``mm``/``addmm``/``bmm``, attention. Each
multiply-accumulate is two FLOPs there, so MACs = FLOPs / 2. What it does not
count is counted as 0 MACs here too: bias additions, normalization,
activations, pooling, element-wise merges (``add``/``concat``), dropout; for a
CNN they are well under 1% of the total. Figures are per sample: one forward
of ``batch_size`` zeros, divided by ``batch_size``. Importing this module loads
neither Lightning nor Hydra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

FLOPS_PER_MAC = 2


def macs_by_module(model: nn.Module, flop_counts: Mapping[str, Mapping[Any, int]], batch_size: int) -> dict[str, int]:
    """Per-sample MACs of every submodule (dotted names as in ``named_modules()``; ``""`` is the model).

    ``flop_counts`` is ``FlopCounterMode.get_flop_counts()`` of a forward of ``batch_size``
    samples; it names modules ``<ModelClass>.<dotted name>``. A parent's figure includes its children's.
    """
    root = type(model).__name__
    flops = {key: sum(ops.values()) for key, ops in flop_counts.items()}
    per_sample = FLOPS_PER_MAC * batch_size
    return {name: flops.get(f"{root}.{name}" if name else root, 0) // per_sample for name, _ in model.named_modules()}


def count_macs(model: nn.Module, input_shape: tuple[int, ...] | list[int], batch_size: int = 1) -> tuple[int, dict[str, int]]:
    """Multiply-accumulates of one sample's forward pass: ``(total, {module name: MACs})``.

    Runs ``batch_size`` zero inputs of ``input_shape`` (without the batch dimension)
    through ``model`` in eval mode without gradients, on the device of its parameters;
    the model's train/eval mode is restored. Every module of ``named_modules()`` except
    the model itself is in the dict (0 for those without matrix products).
    """
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    was_training = model.training
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.eval()(torch.zeros(batch_size, *input_shape, device=device))
    finally:
        model.train(was_training)
    per_module = macs_by_module(model, counter.get_flop_counts(), batch_size)
    total = counter.get_total_flops() // (FLOPS_PER_MAC * batch_size)
    return total, {name: macs for name, macs in per_module.items() if name}


def format_macs(macs: int) -> str:
    """``4241152`` -> ``4.24 M``: a short figure for one-line descriptions."""
    for unit, size in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if macs >= size:
            return f"{macs / size:.2f} {unit}"
    return str(macs)
