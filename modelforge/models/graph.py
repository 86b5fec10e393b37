"""Models written in YAML as a graph of named nodes, with merges for skip connections.

Each node names a block, its arguments and its inputs (``input`` is the
model's input; a node without ``inputs`` reads the node before it). A block is
a registered name (``conv``, ``add``, ...) or any ``torch.nn`` module class
(``nn.Conv2d``, ``torch.nn.LayerNorm``); nothing else resolves. Widths
(``in_channels``, ``in_features``, ``num_features``, ``normalized_shape``) are
inferred by running a dummy batch through the nodes as they are built.

``repeat: N`` stacks N copies of a one-input node in an ``nn.Sequential``, each
with its own parameters and widths inferred from the copy before it; in
``named_modules()`` they are ``nodes.<node>.0`` ... ``nodes.<node>.<N-1>``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.config import require_positive, schema_from_signature, validate
from modelforge.errors import ConfigError, ModelforgeError, closest_names
from modelforge.flops import counts_from_children
from modelforge.layers.blocks import MERGE_BLOCKS
from modelforge.layers.initializers import initialize
from modelforge.layers.kwargs import check_kwargs
from modelforge.layers.torch_nn import infer_widths, resolve_block
from modelforge.registry import MODELS

INPUT = "input"


@counts_from_children
class GraphModel(nn.Module):
    """Runs ``nodes`` in topological ``order``; each reads the outputs named in ``inputs``."""

    def __init__(
        self, nodes: nn.ModuleDict, inputs: dict[str, list[str]], output: str, input_shape: tuple[int, ...]
    ) -> None:
        super().__init__()
        self.nodes = nodes
        self.inputs = inputs
        self.output = output
        self.input_shape = input_shape

    def forward(self, x: Tensor) -> Tensor:
        values = {INPUT: x}
        for name, node in self.nodes.items():
            values[name] = node(*[values[i] for i in self.inputs[name]])
        return values[self.output]

    def extra_repr(self) -> str:
        edges = ", ".join(f"{n} <- {'+'.join(i)}" for n, i in self.inputs.items())
        return f"output={self.output}, edges: {edges}"


@dataclass
class NodeConfig:
    """One node: a block (registered or ``nn.X``), its keyword arguments, its inputs, its copies."""

    block: str
    args: dict[str, Any] = field(default_factory=dict)
    inputs: list[str] | str | None = None
    repeat: int | None = None


def check_graph(cfg: Any, path: str) -> None:
    """The rules of a graph config that types cannot say (the nodes are checked as they are built)."""
    require_positive(cfg.in_channels, f"{path}.in_channels")
    require_positive(cfg.input_size, f"{path}.input_size")
    if not cfg.nodes:
        raise ConfigError(f"{path}.nodes", "a graph needs at least one node")


def _node_inputs(nodes: Mapping[str, NodeConfig], path: str) -> dict[str, list[str]]:
    """Each node's input names, with defaults filled and unknown names rejected."""
    inputs: dict[str, list[str]] = {}
    previous = INPUT
    for name, node in nodes.items():
        names = [previous] if node.inputs is None else [node.inputs] if isinstance(node.inputs, str) else list(node.inputs)
        for i, src in enumerate(names):
            if src != INPUT and src not in nodes:
                raise ConfigError(
                    f"{path}.nodes.{name}.inputs[{i}]",
                    f"node {name!r} reads {src!r}, which is not a node",
                    allowed=[INPUT, *nodes],
                    suggestions=closest_names(src, [INPUT, *nodes]),
                )
        if not names:
            raise ConfigError(f"{path}.nodes.{name}.inputs", f"node {name!r} has no inputs")
        inputs[name] = names
        previous = name
    return inputs


def _topological_order(inputs: dict[str, list[str]], path: str) -> list[str]:
    """Order nodes so each comes after its inputs; a cycle is an error naming its nodes."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == "done" or name == INPUT:
            return
        if state.get(name) == "visiting":
            cycle = trail[trail.index(name):] + [name]
            raise ConfigError(f"{path}.nodes", f"the graph has a cycle: {' -> '.join(cycle)}")
        state[name] = "visiting"
        for src in inputs[name]:
            visit(src, trail + [name])
        state[name] = "done"
        order.append(name)

    for name in inputs:
        visit(name, [])
    return order


def _check_merge(name: str, block: nn.Module, srcs: list[str], shapes: list[torch.Size], path: str) -> None:
    described = ", ".join(f"{s} {list(sh)}" for s, sh in zip(srcs, shapes))
    dim = getattr(block, "dim", None)
    for shape in shapes[1:]:
        a, b = list(shapes[0]), list(shape)
        if dim is not None and len(a) == len(b):
            a.pop(dim), b.pop(dim)
        if a != b:
            how = "add" if dim is None else f"concatenate along dim {dim}"
            raise ConfigError(f"{path}.nodes.{name}", f"node {name!r} cannot {how} inputs of shapes {described}")


def _build_node(name: str, node: NodeConfig, srcs: list[str], values: dict[str, Tensor], path: str) -> nn.Module:
    """Build one node (``repeat`` copies in a Sequential) and store its dry-run output in ``values``."""
    node_path = f"{path}.nodes.{name}"
    factory = resolve_block(node.block, f"{node_path}.block")
    check_kwargs(factory, node.args, f"{node_path}.args", f"block {node.block!r}")
    if node.repeat is not None:
        require_positive(node.repeat, f"{node_path}.repeat")
        if len(srcs) != 1:
            raise ConfigError(f"{node_path}.repeat",
                              f"node {name!r} reads {len(srcs)} inputs; only a one-input node repeats")
    inputs = [values[s] for s in srcs]
    copies: list[nn.Module] = []
    for _ in range(node.repeat or 1):
        shapes = [x.shape for x in inputs]
        described = ", ".join(f"{s} {list(sh)}" for s, sh in zip(srcs, shapes))
        try:
            block = factory(**infer_widths(factory, node.args, shapes[0]))
        except (ModelforgeError, TypeError, ValueError, RuntimeError, AssertionError) as exc:  # torch.nn's own checks
            problem = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ConfigError(node_path, f"node {name!r} ({node.block}): {problem}") from None
        if isinstance(block, MERGE_BLOCKS):
            if node.repeat is not None:
                raise ConfigError(f"{node_path}.repeat", f"merge node {name!r} cannot repeat")
            _check_merge(name, block, srcs, shapes, path)
        elif len(srcs) != 1:
            raise ConfigError(f"{node_path}.inputs", f"block {node.block!r} takes one input, got {len(srcs)}",
                              hint="merge several inputs with an 'add' or 'concat' node")
        try:
            with torch.no_grad():
                inputs = [block.eval()(*inputs)]
        except (RuntimeError, TypeError, ValueError) as exc:
            first = str(exc).splitlines()[0]
            raise ConfigError(node_path,
                              f"node {name!r} ({node.block}) does not fit its input {described}: {first}") from None
        if not isinstance(inputs[0], Tensor):
            raise ConfigError(node_path,
                              f"node {name!r} ({node.block}) returns {type(inputs[0]).__name__}, not a tensor",
                              hint="a graph node must map tensors to one tensor")
        copies.append(block.train())
        srcs = [name]
    values[name] = inputs[0]
    return copies[0] if node.repeat is None else nn.Sequential(*copies)


def build_graph(
    nodes: Mapping[str, Any],
    in_channels: int = 1,
    input_size: Sequence[int] = (28, 28),
    output: str | None = None,
    init: Mapping[str, Any] | None = None,
    path: str = "model",
) -> GraphModel:
    """Build a :class:`GraphModel` from plain node descriptions (see the module docstring).

    ``output`` defaults to the last node; ``init`` is applied with ``model.apply``
    (``None`` keeps PyTorch's init).
    """
    if not nodes:
        raise ConfigError(f"{path}.nodes", "a graph needs at least one node")
    node_cfgs = {
        name: validate(dict(spec or {}), NodeConfig, f"{path}.nodes.{name}", f"graph node {name!r}")
        for name, spec in nodes.items()
    }
    inputs = _node_inputs(node_cfgs, path)
    output = output or list(node_cfgs)[-1]
    if output not in node_cfgs:
        raise ConfigError(f"{path}.output", f"{output!r} is not a node", allowed=list(node_cfgs),
                          suggestions=closest_names(output, node_cfgs))
    order = _topological_order(inputs, path)
    input_shape = (in_channels, *input_size)
    values = {INPUT: torch.zeros(2, *input_shape)}
    modules = nn.ModuleDict()
    for name in order:
        modules[name] = _build_node(name, node_cfgs[name], inputs[name], values, path)
    unused = [n for n in node_cfgs if n != output and not any(n in inputs[m] for m in order)]
    if unused:
        raise ConfigError(f"{path}.nodes", f"nodes {unused} feed nothing and would never be trained",
                          hint=f"wire them into the graph or remove them; the output is {output!r}")
    return initialize(GraphModel(modules, {n: inputs[n] for n in order}, output, input_shape), init or {})


GraphConfig = schema_from_signature(build_graph, "graph", check=check_graph, exclude=("path",))

MODELS.add("graph", build_graph, schema=GraphConfig,
           description="Named nodes of registered blocks or torch.nn modules, wired in YAML")
