"""A text summary of a model: module tree, output shapes, parameters, buffers and multiply-accumulates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from modelforge.inspect.flops import (
    FLOPS_PER_MAC,
    format_macs,
    forward_macs,
    zeros_forward,
)
from modelforge.models.graph import GraphModel
from modelforge.models.shapes import describe_output


@dataclass
class LayerRow:
    """One module of the tree as the summary shows it."""

    name: str
    depth: int
    kind: str
    output_shape: str
    params: int
    buffers: int
    macs: int = 0  # per sample, this module and its children (see modelforge.inspect.flops)
    composite: bool = False  # a composite block's instance: its parts are shown only when expanded


def summarize(model: nn.Module, input_shape: tuple[int, ...], batch_size: int = 2) -> list[LayerRow]:
    """Run one dummy batch through ``model`` (eval mode, no grad) and describe every module.

    The same forward is counted (:func:`modelforge.inspect.flops.forward_macs`): each row's ``macs`` is per sample.
    """
    shapes: dict[str, str] = {}
    handles = []
    for name, module in model.named_modules():
        def record(_m: nn.Module, _inp: Any, out: Any, name: str = name) -> None:
            shapes[name] = describe_output(out)

        handles.append(module.register_forward_hook(record))
    was_training = model.training
    try:
        macs = forward_macs(model, zeros_forward(model, input_shape, batch_size), batch_size)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    rows = []
    for name, module in model.named_modules():
        rows.append(
            LayerRow(
                name=name or "(model)",
                depth=name.count(".") + 1 if name else 0,
                kind=getattr(module, "composite_name", None) or type(module).__name__,
                output_shape=shapes.get(name, "-"),
                params=sum(p.numel() for p in module.parameters()),
                buffers=sum(b.numel() for b in module.buffers()),
                macs=macs.get(name, 0),
                composite=getattr(module, "composite_name", None) is not None,
            )
        )
    return rows


def _collapsed(rows: list[LayerRow]) -> list[LayerRow]:
    """The rows without the parts of composite blocks (each composite stays one row)."""
    kept, inside = [], None
    for row in rows:
        if inside is not None and row.name.startswith(inside):
            continue
        inside = row.name + "." if row.composite else None
        kept.append(row)
    return kept


def format_summary(model: nn.Module, rows: list[LayerRow], input_shape: tuple[int, ...], expand: bool = False,
                   name: str | None = None) -> str:
    """Render summary rows as an indented table with the totals at the end (``name``: the model's, first).

    A composite block is one row (its block name as the type) unless ``expand``.
    """
    composites = any(r.composite for r in rows)
    rows = rows if expand else _collapsed(rows)
    header = ("Layer", "Type", "Output shape", "Params", "Buffers", "MACs")
    # Full dotted names, indented by depth: they are what hook targets (layers=[...]) match.
    table = [(("  " * r.depth) + r.name, r.kind, r.output_shape,
              f"{r.params:,}", f"{r.buffers:,}", f"{r.macs:,}") for r in rows]
    widths = [max(len(str(row[i])) for row in [header, *table]) for i in range(len(header))]
    line = lambda cells: "  ".join(  # noqa: E731 - a local formatter reads best inline
        str(c).ljust(w) if i < 3 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    buffers = sum(b.numel() for b in model.buffers())
    size_mb = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]) / 2**20
    rule = "-" * len(line(header))
    return "\n".join([
        *([f"Model: {name}"] if name else []),
        f"Input shape: {list(input_shape)} (batch dimension first in the shapes below)",
        rule, line(header), rule, *[line(r) for r in table], rule,
        f"Trainable params: {trainable:,}",
        f"Non-trainable params: {total - trainable:,}",
        f"Buffers: {buffers:,}",
        f"Params + buffers size: {size_mb:.2f} MB",
        f"Total MACs: {rows[0].macs:,} per sample ({format_macs(rows[0].macs)}; FLOPs/{FLOPS_PER_MAC} of "
        "convolutions and matrix products; norms, activations, pooling and biases count 0)",
        *([] if expand or not composites else
          ["Composite blocks are one row each; summary.expand=true lists their parts"]),
        f"Total params: {total:,}",
    ])


def describe_model(model: nn.Module, input_shape: tuple[int, ...], name: str | None = None,
                   macs: int | None = None) -> str:
    """One line: ``cnn (CNN): 421,834 params, 4.24 M MACs per sample, input [1, 28, 28]`` (``macs``: counted already).

    A graph model is named by ``name`` alone (``resnet18``, ``yolov8_cls (scale s)``: see
    :func:`modelforge.build.model_label`): its class, GraphModel, says no more than "graph".
    """
    from modelforge.inspect.flops import count_macs

    total = count_macs(model, input_shape)[0] if macs is None else macs
    params = sum(p.numel() for p in model.parameters())
    kind = type(model).__name__
    label = (name if isinstance(model, GraphModel) else f"{name} ({kind})") if name else kind
    return f"{label}: {params:,} params, {format_macs(total)} MACs per sample, input {list(input_shape)}"
