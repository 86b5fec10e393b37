"""Models written in YAML as a graph of named nodes, with merges for skip connections.

Each node names a registered block, its arguments and its inputs (``input``
is the model's input; a node without ``inputs`` reads the node before it).
Channel and feature widths (``in_channels``, ``in_features``) are inferred by
running a dummy batch through the nodes as they are built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.config import require_positive, validate
from modelforge.errors import ConfigError, ModelforgeError, closest_names
from modelforge.layers.blocks import MERGE_BLOCKS
from modelforge.layers.kwargs import accepted_kwargs, check_kwargs
from modelforge.registry import BLOCKS, MODELS

INPUT = "input"


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
    """One node: a registered block, its arguments and the nodes it reads."""

    block: str
    args: dict[str, Any] = field(default_factory=dict)
    inputs: list[str] | str | None = None


@dataclass
class GraphConfig:
    """Options of ``model=graph``."""

    name: str = "graph"
    in_channels: int = 1
    input_size: list[int] = field(default_factory=lambda: [28, 28])
    nodes: dict[str, Any] = field(default_factory=dict)
    output: str | None = None
    init: dict[str, Any] = field(default_factory=dict)

    def check(self, path: str) -> None:
        require_positive(self.in_channels, f"{path}.in_channels")
        require_positive(self.input_size, f"{path}.input_size")
        if not self.nodes:
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


def _infer_args(factory: Any, args: dict[str, Any], shapes: list[torch.Size]) -> dict[str, Any]:
    """Fill ``in_channels``/``in_features`` from the first input's shape when the block takes them."""
    accepted = accepted_kwargs(factory) or []
    filled = dict(args)
    if "in_channels" in accepted and "in_channels" not in filled and len(shapes[0]) > 1:
        filled["in_channels"] = shapes[0][1]
    if "in_features" in accepted and "in_features" not in filled:
        filled["in_features"] = shapes[0][-1]
    return filled


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


def build_graph(
    in_channels: int = 1,
    input_size: list[int] = (28, 28),
    nodes: Mapping[str, Any] | None = None,
    output: str | None = None,
    path: str = "model",
) -> GraphModel:
    """Build a :class:`GraphModel` from plain node descriptions (see the module docstring)."""
    node_cfgs = {
        name: validate(dict(spec or {}), NodeConfig, f"{path}.nodes.{name}", f"graph node {name!r}")
        for name, spec in (nodes or {}).items()
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
        node = node_cfgs[name]
        node_path = f"{path}.nodes.{name}"
        factory = BLOCKS.get(node.block, path=f"{node_path}.block")
        check_kwargs(factory, node.args, f"{node_path}.args", f"block {node.block!r}")
        srcs = inputs[name]
        shapes = [values[s].shape for s in srcs]
        try:
            block = factory(**_infer_args(factory, node.args, shapes))
        except ModelforgeError as exc:
            raise ConfigError(node_path, f"node {name!r} ({node.block}): {exc}") from None
        if isinstance(block, MERGE_BLOCKS):
            _check_merge(name, block, srcs, shapes, path)
        elif len(srcs) != 1:
            raise ConfigError(f"{node_path}.inputs", f"block {node.block!r} takes one input, got {len(srcs)}",
                              hint="merge several inputs with an 'add' or 'concat' node")
        try:
            with torch.no_grad():
                values[name] = block.eval()(*[values[s] for s in srcs])
        except RuntimeError as exc:
            first = str(exc).splitlines()[0]
            described = ", ".join(f"{s} {list(sh)}" for s, sh in zip(srcs, shapes))
            raise ConfigError(node_path, f"node {name!r} ({node.block}) does not fit its input {described}: {first}") from None
        modules[name] = block.train()
    unused = [n for n in node_cfgs if n != output and not any(n in inputs[m] for m in order)]
    if unused:
        raise ConfigError(f"{path}.nodes", f"nodes {unused} feed nothing and would never be trained",
                          hint=f"wire them into the graph or remove them; the output is {output!r}")
    return GraphModel(modules, {n: inputs[n] for n in order}, output, input_shape)


MODELS.add("graph", build_graph, schema=GraphConfig, description="Named nodes of registered blocks wired in YAML")
