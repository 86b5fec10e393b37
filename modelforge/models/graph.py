"""Models written in YAML as a graph of named nodes: the model language's entry point.

Each node names a block, its arguments and its inputs (``input`` is the
model's input; a node without ``inputs`` reads the node before it). A block is
a registered name (``conv``, ``add``, ...), any ``torch.nn`` module class
(``nn.Conv2d``, ``torch.nn.LayerNorm``) or a composite block defined in the
model's ``blocks`` table (see :mod:`modelforge.models.graph_spec`); nothing
else resolves. Widths (``in_channels``, ``in_features``, ``num_features``,
``normalized_shape``, ``embed_dim``, ...) are inferred by running a dummy
batch through the nodes as they are built.

``repeat: N`` stacks N copies of a one-input node, each with its own parameters
and widths inferred from the copy before it; in ``named_modules()`` they are
``nodes.<node>.0`` ... ``nodes.<node>.<N-1>``, and a composite's parts follow
(``nodes.layer2.0.conv1``). String arguments may be expressions over the
model's parameters (``in_channels``, ``n_classes``, ``params``) and, in a
repeated node, ``index`` (:mod:`modelforge.layers.expressions`). A ``scales``
table with ``scale`` multiplies depths and widths (:mod:`modelforge.models.scales`).
``max_repeat`` and ``max_nodes`` cap the size before anything is built
(:mod:`modelforge.models.graph_bounds`); a classifier's output must be ``n_classes`` wide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.config import require_positive, schema_from_signature
from modelforge.errors import ConfigError
from modelforge.layers.initializers import initialize
from modelforge.layers.macs import counts_from_children
from modelforge.layers.torch_nn import resolve_block
from modelforge.models.graph_bounds import MAX_NODES, MAX_REPEAT, Bounds, check_size
from modelforge.models.graph_build import Graph, GraphBuilder
from modelforge.models.graph_spec import Composite, NodeTable, parse_blocks, parse_table
from modelforge.models.scales import choose_scale
from modelforge.registry import MODELS


@counts_from_children
class GraphModel(nn.Module):
    """A model whose ``nodes`` (a :class:`~modelforge.models.graph_build.Graph`) run in order on the input image."""

    def __init__(self, nodes: Graph, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.nodes = nodes
        self.input_shape = input_shape

    def forward(self, x: Tensor) -> Tensor:
        return self.nodes(x)


def _model_scope(in_channels: int, input_size: Sequence[int], n_classes: int,
                 params: Mapping[str, Any] | None, path: str) -> dict[str, Any]:
    """The names a model's own node arguments may use."""
    scope: dict[str, Any] = {"in_channels": in_channels, "input_size": list(input_size), "n_classes": n_classes}
    for key, value in (params or {}).items():
        if key in scope:
            raise ConfigError(f"{path}.params.{key}", f"{key!r} is a model option; set {path}.{key} instead")
        scope[str(key)] = value
    return scope


def parse_graph(nodes: Mapping[str, Any], output: Any, blocks: Mapping[str, Any] | None,
                path: str) -> tuple[dict[str, Composite], NodeTable]:
    """The model's composites and node table, checked (nothing is built)."""
    composites = parse_blocks(blocks, path)

    def is_block(name: str, where: str) -> None:
        if name not in composites:
            resolve_block(name, where, composites=composites)

    return composites, parse_table(nodes, output, path, is_block)


def check_graph(cfg: Any, path: str) -> None:
    """The rules of a graph config checked before any work: sizes, blocks, wiring, scale, bounds."""
    require_positive(cfg.in_channels, f"{path}.in_channels")
    require_positive(cfg.input_size, f"{path}.input_size")
    require_positive(cfg.n_classes, f"{path}.n_classes")
    _checked_graph(cfg.nodes, cfg.in_channels, cfg.input_size, cfg.n_classes, cfg.output, cfg.params, cfg.blocks,
                   cfg.scales, cfg.scale, cfg.max_repeat, cfg.max_nodes, path)


def _checked_graph(nodes: Mapping[str, Any], in_channels: int, input_size: Sequence[int], n_classes: int, output: Any,
                   params: Mapping[str, Any] | None, blocks: Mapping[str, Any] | None, scales: Mapping[str, Any] | None,
                   scale: str | None, max_repeat: int, max_nodes: int,
                   path: str) -> tuple[GraphBuilder, NodeTable, dict[str, Any]]:
    """A builder, the model's table and its names, all checked: wiring, scale, bounds on its size (nothing built)."""
    require_positive(max_repeat, f"{path}.max_repeat")
    require_positive(max_nodes, f"{path}.max_nodes")
    composites, table = parse_graph(nodes, output, blocks, path)
    chosen = choose_scale(scales, scale, path)
    scope = _model_scope(in_channels, input_size, n_classes, params, path)
    bounds = Bounds(max_repeat, max_nodes, path)
    check_size(table, composites, scope, chosen, bounds)
    return GraphBuilder(composites, chosen, bounds), table, scope


def build_graph(
    nodes: Mapping[str, Any],
    in_channels: int = 1,
    input_size: Sequence[int] = (28, 28),
    n_classes: int = 10,
    output: str | list[str] | None = None,
    params: dict[str, Any] | None = None,
    blocks: dict[str, Any] | None = None,
    scales: dict[str, Any] | None = None,
    scale: str | None = None,
    init: Mapping[str, Any] | None = None,
    max_repeat: int = MAX_REPEAT,
    max_nodes: int = MAX_NODES,
    path: str = "model",
) -> GraphModel:
    """Build a :class:`GraphModel` from plain node descriptions (see the module docstring).

    Args:
        output: the node the model returns; the last node by default.
        params: names the nodes' arguments may use besides ``in_channels``, ``input_size``, ``n_classes``.
        blocks: composite blocks, name -> ``{params, nodes, output, description, repeats}``.
        scales, scale: a table of ``{depth, width, max_channels}`` and the entry to apply.
        init: applied with ``model.apply`` (``None`` keeps PyTorch's init).
        max_repeat, max_nodes: caps on a ``repeat`` count and on the nodes built, copies and composite
            parts included (:mod:`modelforge.models.graph_bounds`), checked before anything is built.
    """
    builder, table, scope = _checked_graph(nodes, in_channels, input_size, n_classes, output, params, blocks,
                                           scales, scale, max_repeat, max_nodes, path)
    input_shape = (in_channels, *input_size)
    graph, output = builder.build(table, (torch.zeros(2, *input_shape),), scope, top=True)
    _check_class_count(output, n_classes, table, path)
    return initialize(GraphModel(graph, input_shape), init or {})


def _check_class_count(output: Any, n_classes: int, table: NodeTable, path: str) -> None:
    """A model that outputs one value per sample and channel ([B, C] or [B, C, 1, 1]) gives ``n_classes`` of them."""
    if not isinstance(output, Tensor) or output.dim() < 2 or any(size != 1 for size in output.shape[2:]):
        return  # several outputs, or a feature map: not a classifier's logits
    if output.shape[1] != n_classes:
        last = table.output[0]
        raise ConfigError(f"{path}.nodes.{last.node}",
                          f"the output node {str(last)!r} gives {output.shape[1]} values per sample, "
                          f"but the data has {n_classes} classes ({path}.n_classes)",
                          hint="write the head's width as n_classes (out_features: n_classes or out_channels: "
                               "n_classes): scales never change it")


GraphConfig = schema_from_signature(build_graph, "graph", check=check_graph, exclude=("path",))

MODELS.add("graph", build_graph, schema=GraphConfig,
           description="Named nodes of registered blocks, torch.nn modules and composite blocks, wired in YAML")
