"""A picture of a model's module graph, traced with forward hooks and drawn with matplotlib (SVG or PNG).

One dummy forward is recorded: every *unit* (a registered block such as
``ConvBlock`` or ``Add``, or a leaf module; containers like ``Sequential`` and the
model itself are looked through) notes which earlier unit produced each of its
input tensors. Units are drawn top to bottom in the order they ran; an edge
between neighbours is a straight arrow, and an edge that skips rows (a residual
or a concatenation input) is drawn as an arc on the right, so skips are visible.
A tensor made outside any module (``x + y`` in a ``forward``) is linked to the
unit that ran last before it. This needs no Graphviz: matplotlib, already a
dependency, writes the file, which is replaced atomically.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.errors import ConfigError
from modelforge.files.paths import check_writable
from modelforge.models.shapes import describe_output

FORMATS = ("svg", "png", "pdf")


@dataclass
class Unit:
    """A node of the picture: the module's dotted name, type, output shape and the units it reads."""

    name: str
    kind: str
    shape: str
    inputs: list[int] = field(default_factory=list)  # indices into the unit list; -1 is the input


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _is_unit(module: nn.Module, block_types: tuple[type, ...]) -> bool:
    return isinstance(module, block_types) or next(module.children(), None) is None


def trace_units(model: nn.Module, input_shape: tuple[int, ...]) -> list[Unit]:
    """The units one forward of a zero batch runs, in order, with the edges between them."""
    from modelforge.registry import BLOCKS

    block_types = tuple(t for t in (BLOCKS.get(n) for n in BLOCKS.names()) if isinstance(t, type))
    units: list[Unit] = []
    producer: dict[int, int] = {}
    keep: list[Tensor] = []  # holds traced tensors so their ids are not reused during the forward
    active: list[nn.Module] = []
    handles = []

    def before(name: str, module: nn.Module, args: tuple[Any, ...]) -> None:
        if active:
            return  # inside a unit: its own children are part of it
        active.append(module)
        sources = []
        for t in _tensors(args):
            source = producer.get(id(t), len(units) - 1 if units else -1)
            if source not in sources:
                sources.append(source)
        units.append(Unit(name, type(module).__name__, "", sources))

    def after(name: str, module: nn.Module, args: Any, output: Any) -> None:
        if not active or active[-1] is not module:
            return
        active.pop()
        units[-1].shape = describe_output(output)
        for t in _tensors(output):
            producer[id(t)] = len(units) - 1
            keep.append(t)

    for name, module in model.named_modules():
        if name and _is_unit(module, block_types):
            handles.append(module.register_forward_pre_hook(lambda m, a, n=name: before(n, m, a)))
            handles.append(module.register_forward_hook(lambda m, a, o, n=name: after(n, m, a, o)))
    param = next(model.parameters(), None)
    x = torch.zeros(1, *input_shape, device=param.device if param is not None else None)
    producer[id(x)] = -1
    was_training = model.training
    try:
        with torch.no_grad():
            model.eval()(x)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return units


def check_picture_path(path: str | Path, key: str = "summary.graph") -> str:
    """The picture format of ``path`` (its suffix); ConfigError at ``key`` when it is not one matplotlib writes,
    or when the file cannot be written there."""
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ConfigError(key, f"{str(path)!r} has no picture suffix", allowed=", ".join(FORMATS),
                          hint=f"{key}=model.svg")
    check_writable(path, key, folder=False)
    return fmt


def draw_model_graph(model: nn.Module, input_shape: tuple[int, ...], path: str | Path, title: str = "") -> Path:
    """Write the module graph of ``model`` to ``path`` (``.svg``, ``.png`` or ``.pdf``); returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch

    path = Path(path)
    fmt = check_picture_path(path)
    units = trace_units(model, input_shape)
    rows = len(units) + 1
    fig = Figure(figsize=(6.5, 0.62 * rows + 0.6))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 0.98 if title else 1))
    ax.set_xlim(0, 10)
    ax.set_ylim(-rows + 0.4, 0.8)
    ax.set_axis_off()
    box = dict(boxstyle="round,pad=0.3", facecolor="#e8f0fb", edgecolor="#36c")
    labels = [f"input  {list(input_shape)}"] + [f"{u.name}  ({u.kind})  {u.shape}" for u in units]
    for row, text in enumerate(labels):
        style = box if row else dict(box, facecolor="#eee", edgecolor="#666")
        ax.text(4, -row, text, ha="center", va="center", fontsize=8, family="monospace", bbox=style)
    # Right edge of each box: monospace 8 pt is about 0.103 x-units a character at this figure width.
    edge = [4 + 0.0515 * len(text) + 0.2 for text in labels]
    for row, unit in enumerate(units, start=1):
        for source in unit.inputs:
            src_row = source + 1
            if src_row == row - 1:
                arrow = FancyArrowPatch((4, -src_row - 0.27), (4, -row + 0.27), arrowstyle="-|>",
                                        mutation_scale=9, color="#333", lw=0.8)
            else:  # a skip: an arc whose bulge grows with the rows it jumps
                span = row - src_row
                arrow = FancyArrowPatch((edge[src_row], -src_row), (edge[row], -row), arrowstyle="-|>",
                                        mutation_scale=9, connectionstyle=f"arc3,rad={-0.35 - 0.02 * span}",
                                        color="#c33", lw=1.0)
            ax.add_patch(arrow)
    if title:
        fig.suptitle(title, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=fmt, dpi=100)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
