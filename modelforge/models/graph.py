"""Models written in YAML as a graph of named nodes: the model language's entry point.

Each node names a block, its arguments and its inputs (``input`` is the
model's input; a node without ``inputs`` reads the node before it). A block is
a registered name (``conv``, ``add``, ...), any ``torch.nn`` module class
(``nn.Conv2d``, ``torch.nn.LayerNorm``) or a composite block defined in the
model's ``blocks`` table (see :mod:`modelforge.models.graph_spec`); nothing
else resolves. Widths (``in_channels``, ``in_features``, ``num_features``,
``normalized_shape``, ``embed_dim``, ...) are inferred from the shapes of a batch
run through the nodes as they are built, a batch without samples: shapes without
arithmetic (:mod:`modelforge.models.graph_dry_run`).

``repeat: N`` stacks N copies of a one-input node, each with its own parameters
and widths inferred from the copy before it; in ``named_modules()`` they are
``nodes.<node>.0`` ... ``nodes.<node>.<N-1>``, and a composite's parts follow
(``nodes.layer2.0.conv1``). String arguments may be expressions over the
model's parameters (``in_channels``, ``n_classes``, ``params``) and, in a
repeated node, ``index`` (:mod:`modelforge.layers.expressions`). A ``scales``
table with ``scale`` multiplies depths and widths (:mod:`modelforge.models.scales`).
``max_repeat``, ``max_nodes`` and ``max_params`` cap the size before anything is
allocated (:mod:`modelforge.models.graph_bounds`, :mod:`modelforge.models.param_cap`).

The builder builds what the config describes, whatever its output: ``n_classes: null``
leaves the head out (every node whose arguments use ``n_classes``), and ``features``
returns a dict of named nodes' outputs (feature maps). Whether the output fits a
classifier is checked where one is trained (:mod:`modelforge.models.heads`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.config import require_positive, schema_from_signature
from modelforge.errors import ConfigError, closest_names
from modelforge.layers.expressions import resolve_args
from modelforge.layers.initializers import make_block_init
from modelforge.layers.macs import counts_from_children
from modelforge.layers.torch_nn import resolve_block
from modelforge.models.graph_bounds import MAX_NODES, MAX_REPEAT, Bounds, check_size
from modelforge.models.graph_build import Graph, GraphBuilder, NonPositiveWidth, source_label
from modelforge.models.feature_info import feature_info
from modelforge.models.graph_dry_run import DryRun, empty_batch
from modelforge.models.graph_spec import Composite, NodeTable, parse_blocks, parse_table
from modelforge.models.param_cap import MAX_PARAMS, ParamBudget, check_param_count
from modelforge.models.scales import Scale, choose_scale
from modelforge.registry import MODELS


@counts_from_children
class GraphModel(nn.Module):
    """A model whose ``nodes`` (a :class:`~modelforge.models.graph_build.Graph`) run in order on the input image.

    ``output_shape``: the output's shape per sample (None when the model returns several outputs);
    ``output_node``: the node it comes from. With ``features``, the model returns a dict of those nodes'
    outputs, described in ``feature_info`` as timm describes its feature maps (``module``, ``num_chs``,
    ``reduction``).
    """

    def __init__(self, nodes: Graph, input_shape: tuple[int, ...], output_shape: tuple[int, ...] | None = None,
                 output_node: str | None = None, features: Sequence[str] = (),
                 feature_info: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__()
        self.nodes = nodes
        self.input_shape = input_shape
        self.output_shape = output_shape
        self.output_node = output_node
        self.features = list(features)
        self.feature_info = list(feature_info)

    def forward(self, x: Tensor) -> Any:
        out = self.nodes(x)
        return dict(zip(self.features, out)) if self.features else out


def _model_scope(in_channels: int, input_size: Sequence[int], n_classes: int | None,
                 params: Mapping[str, Any] | None, path: str) -> dict[str, Any]:
    """The names a model's own node arguments may use; a parameter may be an expression of those before it."""
    scope: dict[str, Any] = {"in_channels": in_channels, "input_size": list(input_size), "n_classes": n_classes}
    for key, value in (params or {}).items():
        if key in scope:
            raise ConfigError(f"{path}.params.{key}", f"{key!r} is a model option; set {path}.{key} instead")
        scope[str(key)] = resolve_args(value, scope, f"{path}.params.{key}")
    return scope


def parse_graph(nodes: Mapping[str, Any], output: Any, blocks: Mapping[str, Any] | None,
                path: str, features: Sequence[str] | None = None, heads: Mapping[str, Any] | None = None,
                head: str | None = None) -> tuple[dict[str, Composite], NodeTable]:
    """The model's composites and node table, checked (nothing is built); with ``features``, those are the
    outputs and nodes none of them needs are left out rather than refused; with ``head``, that entry of ``heads``
    is a node of the model and its output, and the nodes it does not need (the model's own head) are left out."""
    composites = parse_blocks(blocks, path)

    def is_block(name: str, where: str) -> None:
        if name not in composites:
            resolve_block(name, where, composites=composites)

    if head is not None:
        nodes, output = _with_head(nodes, heads or {}, head, path), head
    if features:
        return composites, parse_table(nodes, list(features), path, is_block, prune=True, output_key="features")
    return composites, parse_table(nodes, output, path, is_block, prune=head is not None)


def _with_head(nodes: Mapping[str, Any], heads: Mapping[str, Any], head: str, path: str) -> dict[str, Any]:
    """The node table with the node ``heads[head]`` added under the name ``head``."""
    if head not in heads:
        raise ConfigError(f"{path}.head", f"the model has no head {head!r}", allowed=list(heads) or
                          "none: this model's file has no `heads`", suggestions=closest_names(head, heads))
    if head in nodes:
        raise ConfigError(f"{path}.heads.{head}", f"{head!r} names a node of the model already",
                          hint="a head is a node named after its key: rename that node")
    return {**nodes, head: heads[head]}


def check_graph(cfg: Any, path: str) -> None:
    """The rules of a graph config checked before any work: sizes, blocks, wiring, scale, bounds."""
    require_positive(cfg.in_channels, f"{path}.in_channels")
    require_positive(cfg.input_size, f"{path}.input_size")
    if cfg.n_classes is not None:
        require_positive(cfg.n_classes, f"{path}.n_classes")
    _checked_graph(cfg.nodes, cfg.in_channels, cfg.input_size, cfg.n_classes, cfg.output, cfg.features, cfg.params,
                   cfg.blocks, cfg.scales, cfg.scale, cfg.max_repeat, cfg.max_nodes, cfg.heads, cfg.head, path)


# The last config checked and what checking it gave: build_model validates a config, then builds the same
# objects (validate_model_config's result is "not checked again"), which are parsed once.
_last_checked: list[tuple[tuple[Any, ...], tuple[dict[str, Composite], NodeTable, Scale, Bounds, dict[str, Any]]]] = []


def _checked_graph(*config: Any) -> tuple[GraphBuilder, NodeTable, dict[str, Any]]:
    """A builder, the model's table and its names, all checked: wiring, scale, bounds on its size (nothing built).
    ``config``: :func:`_check_config`'s arguments."""
    if _last_checked and len(_last_checked[0][0]) == len(config) and all(
            a is b for a, b in zip(_last_checked[0][0], config)):
        composites, table, chosen, bounds, scope = _last_checked[0][1]
    else:
        composites, table, chosen, bounds, scope = _check_config(*config)
        _last_checked[:] = [(config, (composites, table, chosen, bounds, scope))]
    return GraphBuilder(composites, chosen, bounds), table, dict(scope)


def _check_config(nodes: Mapping[str, Any], in_channels: int, input_size: Sequence[int], n_classes: int | None,
                  output: Any, features: Sequence[str] | None, params: Mapping[str, Any] | None,
                  blocks: Mapping[str, Any] | None, scales: Mapping[str, Any] | None, scale: str | None,
                  max_repeat: int, max_nodes: int, heads: Mapping[str, Any] | None, head: str | None,
                  path: str) -> tuple[dict[str, Composite], NodeTable, Scale, Bounds, dict[str, Any]]:
    require_positive(max_repeat, f"{path}.max_repeat")
    require_positive(max_nodes, f"{path}.max_nodes")
    if features is not None and not features:
        raise ConfigError(f"{path}.features", "names no node", hint="name the nodes whose outputs you want, "
                          "e.g. [layer2, layer3, layer4], or leave features out (null) for the model's output")
    if features and (twice := sorted({str(f) for f in features if list(map(str, features)).count(str(f)) > 1})):
        raise ConfigError(f"{path}.features", f"names {', '.join(map(repr, twice))} more than once: the model "
                          "returns one map per node", hint="name each node once")
    composites, table = parse_graph(nodes, output, blocks, path, features, heads, head)
    chosen = choose_scale(scales, scale, path)
    scope = _model_scope(in_channels, input_size, n_classes, params, path)
    bounds = Bounds(max_repeat, max_nodes, path)
    check_size(table, composites, scope, chosen, bounds)
    return composites, table, chosen, bounds, scope


def build_graph(
    nodes: Mapping[str, Any],
    in_channels: int = 1,
    input_size: Sequence[int] = (28, 28),
    n_classes: int | None = 10,
    output: str | list[str] | None = None,
    features: list[str] | None = None,
    params: dict[str, Any] | None = None,
    blocks: dict[str, Any] | None = None,
    scales: dict[str, Any] | None = None,
    scale: str | None = None,
    init: Mapping[str, Any] | None = None,
    heads: dict[str, Any] | None = None,
    head: str | None = None,
    max_repeat: int = MAX_REPEAT,
    max_nodes: int = MAX_NODES,
    max_params: int = MAX_PARAMS,
    path: str = "model",
) -> GraphModel:
    """Build a :class:`GraphModel` from plain node descriptions (see the module docstring).

    Args:
        n_classes: the data's class count, for the head's width; ``None`` (null) leaves out every block whose
            arguments use it (a composite that takes it gets null, and leaves out its own): the model ends where
            its head would start (resnet18: 512 pooled features).
        output: the node the model returns; the last node by default.
        features: nodes whose outputs the model returns instead, as a dict (feature maps); nodes none of them
            needs are not built. ``model.feature_info`` describes each (channels, reduction of the input size).
        params: names the nodes' arguments may use besides ``in_channels``, ``input_size``, ``n_classes``;
            each may be an expression of those and of the parameters before it.
        blocks: composite blocks, name -> ``{params, nodes, output, description, repeats}``.
        scales, scale: a table of ``{depth, width, max_channels}`` and the entry to apply.
        init: rules (conv, linear, bias, norm) applied to each block as it is made (``None`` keeps PyTorch's init).
        heads: other heads the model can carry, by the kind of output they give (``class_map``: a segmentation
            head on the backbone's stages), each a node (``{block: fpn_head, inputs: [layer1, ...], args: ...}``).
        head: the entry of ``heads`` to build in place of the model's own output (None: the model's own); a run
            chooses its task's (``Task.choose_head`` in modelforge/tasks.py). Nodes the head does not need are
            left out (the classifier).
        max_repeat, max_nodes: caps on a ``repeat`` count and on the nodes built, copies and composite
            parts included (:mod:`modelforge.models.graph_bounds`), checked before anything is built.
        max_params: a cap on the parameters and buffers, counted before any is allocated
            (:mod:`modelforge.models.param_cap`).
    """
    builder, table, scope = _checked_graph(nodes, in_channels, input_size, n_classes, output, features, params, blocks,
                                           scales, scale, max_repeat, max_nodes, heads, head, path)
    _last_checked.clear()  # checked once per build: a later build of the same objects checks them again
    builder.dry_run = DryRun(make_block_init(init or {}, f"{path}.init"), ParamBudget(max_params, path))
    input_shape = (in_channels, *input_size)
    with torch.no_grad():  # the init rules fill weights in place; the dry run needs no graph of its own
        try:
            graph, output_value = builder.build(table, (empty_batch(*input_shape),), scope, top=True)
        except NonPositiveWidth as exc:
            raise _width_error(exc, params or {}, path) from None
    check_param_count(graph, max_params, path)  # blocks too large alone were refused before being made
    if features and (left := [str(ref) for ref in table.output if ref.node not in graph]):
        raise ConfigError(f"{path}.features", f"names {', '.join(map(repr, left))}, which this model leaves out "
                          "(n_classes null leaves out the head; a false `when` its node): the map would be "
                          "another node's, passed on under that name", hint="name nodes the model keeps")
    single = isinstance(output_value, Tensor)
    model = GraphModel(graph, input_shape, tuple(output_value.shape[1:]) if single else None,
                       source_label(graph.output[0]) if single else None,
                       features=[str(ref) for ref in table.output] if features else (),
                       feature_info=feature_info(graph, table.output, output_value, input_shape) if features else ())
    return model


def _width_error(exc: NonPositiveWidth, params: Mapping[str, Any], path: str) -> ConfigError:
    """A width of 0 or less as the error of the model parameter it came from (``model.params.enc_sizes[1]: must be
    positive, got -4``), as ``cnn`` refuses its ``enc_sizes``; at the node when no parameter gave it."""
    for key in (k for k in params if k in exc.sources):
        value = params[key]
        entries = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
        for i, v in entries:
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
                where = f"{path}.params.{key}" + (f"[{i}]" if i is not None else "")
                return ConfigError(where, f"must be positive, got {v}: {key} gives the widths of layers",
                                   allowed="integers >= 1")
        return ConfigError(f"{path}.params.{key}", f"gives a width of {exc.value}, and widths must be positive: "
                           f"{exc.problem}", allowed=exc.allowed)
    return exc


GraphConfig = schema_from_signature(build_graph, "graph", check=check_graph, exclude=("path",))

MODELS.add("graph", build_graph, schema=GraphConfig,
           description="Named nodes of registered blocks, torch.nn modules and composite blocks, wired in YAML")
