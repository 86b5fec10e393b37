"""The one line a run logs about its model, in place of Lightning's summary table."""

from __future__ import annotations

import torch
from torch import nn


def describe_model(model: nn.Module, name: str) -> str:
    """``model cnn: 421,834 params, 2.36 M MACs per sample`` (MACs when the input shape is known)."""
    line = f"model {name}: {sum(p.numel() for p in model.parameters()):,} params"
    macs = count_macs(model)
    return line if macs is None else f"{line}, {_si(macs)} MACs per sample"


def count_macs(model: nn.Module) -> int | None:
    """Multiply-accumulates of one forward pass of one sample of ``model.input_shape``.

    MERGE NOTE: the hook/FLOPs work adds modelforge's own ``count_macs(model, input_shape)``;
    call it here instead once merged (it gives the same figure: torch's FlopCounterMode / 2).
    """
    shape = getattr(model, "input_shape", None)
    if shape is None:
        return None
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()  # BatchNorm statistics and dropout untouched; no RNG drawn
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.zeros(1, *shape))
    finally:
        model.train(was_training)
    return counter.get_total_flops() // 2


def _si(value: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(value) < 1000:
            return f"{value:.3g} {unit}".rstrip()
        value /= 1000
    return f"{value:.3g} P"
