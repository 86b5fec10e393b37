"""The static half of the model language: node tables and composite blocks, checked before building.

A node table maps node names to ``{block, args, inputs, repeat, when, kwargs}`` (``kwargs``: keyword
arguments the block's ``forward`` is called with, e.g. ``{need_weights: false}``). An
input reference is ``input`` (the table's input), a node name, or a part of a
node's output: ``lstm.0`` (element 0 of a tuple), ``lstm.1.0`` (nested),
``m.2`` (copy 2 of a repeated node), ``m.*`` (every part, in order). A
composite block is a node table with ``params`` (name -> default; ``???``
means required), an ``output``, a one-line ``description`` and optionally
``repeats: <param>``, the parameter that receives a node's ``repeat`` count
(ultralytics' C2f: the count of inner bottlenecks) instead of stacking copies,
and ``widths: [<param>, ...]``, the parameters a model's ``scales`` scale as
they scale ``out_channels``.
A node's ``when`` (a condition over the parameters) leaves the node out when
false: whatever reads it reads the node's first input instead (a ResNet
projection shortcut that exists only when the shape changes; a residual ``add``
only when ``shortcut``).

Everything here is checked without building anything: names, references,
cycles (between nodes and between composites), the blocks named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from modelforge.config import require_positive, validate
from modelforge.config_types import check_type
from modelforge.errors import ConfigError, closest_names
from modelforge.layers.torch_nn import resolve_block
from modelforge.registry import BLOCKS

INPUT = "input"
REQUIRED = "???"
EVERY = "*"
# Attribute names of the module that holds a table's nodes: a node so named would shadow one.
_RESERVED = frozenset(dir(nn.ModuleDict())) | {INPUT}


@dataclass
class NodeConfig:
    """One node: a block (registered, ``nn.X`` or a composite), its arguments, inputs, copies and condition."""

    block: str
    args: dict[str, Any] = field(default_factory=dict)
    inputs: list[str] | str | None = None
    repeat: int | str | None = None
    when: bool | str | None = None
    kwargs: dict[str, Any] | None = None  # keyword arguments of the block's forward (need_weights: false)


@dataclass
class CompositeConfig:
    """A block written as a node table, with parameters."""

    nodes: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    output: str | list[str] | None = None
    description: str = ""
    repeats: str | None = None
    widths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Ref:
    """A reference to (part of) a node's output: ``node``, then indices; ``every`` for ``node.*``."""

    node: str
    index: tuple[int, ...] = ()
    every: bool = False

    def __str__(self) -> str:
        return ".".join([self.node, *map(str, self.index), *([EVERY] if self.every else [])])


@dataclass
class NodeTable:
    """A checked node table: nodes, each node's input references, a build order and the output."""

    nodes: dict[str, NodeConfig]
    inputs: dict[str, list[Ref]]
    order: list[str]
    output: list[Ref]
    several_outputs: bool
    path: str

    def repeated_parts_read(self) -> set[str]:
        """Repeated nodes some reference reads copy by copy (``m.0``, ``m.*``)."""
        refs = [r for rs in self.inputs.values() for r in rs] + self.output
        return {r.node for r in refs if (r.index or r.every) and r.node in self.nodes
                and self.nodes[r.node].repeat is not None}


@dataclass
class Composite:
    """A checked composite block."""

    name: str
    config: CompositeConfig
    table: NodeTable
    path: str


def parse_ref(text: Any, path: str) -> Ref:
    """``name``, ``name.0``, ``name.1.0``, ``name.*`` -> a :class:`Ref`."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str) or not text:
        raise ConfigError(path, f"expected a node name, got {text!r}")
    head, *parts = text.split(".")
    every = bool(parts) and parts[-1] == EVERY
    if every:
        parts = parts[:-1]
    if not all(p.lstrip("-").isdigit() for p in parts):
        raise ConfigError(path, f"cannot read {text!r}",
                          allowed="a node name, or a part of its output: node.0, node.1.0, node.*")
    return Ref(head, tuple(int(p) for p in parts), every)


def _check_node_name(name: str, path: str) -> None:
    if not name or "." in name or name in _RESERVED:
        raise ConfigError(f"{path}.nodes.{name}", f"{name!r} cannot name a node",
                          allowed="a name without dots, other than 'input' and the module attributes "
                                  "(keys, items, values, update, pop, clear, ...)")


def _node_inputs(nodes: Mapping[str, NodeConfig], path: str) -> dict[str, list[Ref]]:
    """Each node's input references, with defaults filled (the node above) and unknown names rejected."""
    inputs: dict[str, list[Ref]] = {}
    previous = INPUT
    for name, node in nodes.items():
        raw = [previous] if node.inputs is None else [node.inputs] if isinstance(node.inputs, str) else list(node.inputs)
        if not raw and node.when is not None:  # a left-out node passes its first input on: it needs one
            raise ConfigError(f"{path}.nodes.{name}.when", f"node {name!r} reads no input, so it cannot be left out",
                              hint="remove `when`, or give the node an input")
        refs = [parse_ref(src, f"{path}.nodes.{name}.inputs[{i}]") for i, src in enumerate(raw)]
        for i, ref in enumerate(refs):
            if ref.node != INPUT and ref.node not in nodes:
                raise ConfigError(
                    f"{path}.nodes.{name}.inputs[{i}]",
                    f"node {name!r} reads {ref.node!r}, which is not a node",
                    allowed=[INPUT, *nodes],
                    suggestions=closest_names(ref.node, [INPUT, *nodes]),
                )
        inputs[name] = refs
        previous = name
    return inputs


def _topological_order(inputs: dict[str, list[Ref]], path: str) -> list[str]:
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
        for ref in inputs[name]:
            visit(ref.node, trail + [name])
        state[name] = "done"
        order.append(name)

    for name in inputs:
        visit(name, [])
    return order


def parse_table(
    nodes: Mapping[Any, Any], output: Any, path: str, is_block: Callable[[str, str], None], prune: bool = False,
    output_key: str = "output",
) -> NodeTable:
    """Check a node table; ``is_block(name, path)`` raises for a block name that does not resolve.

    A node that feeds nothing is an error, unless ``prune``: then every node the output does not need is left
    out (feature maps of a backbone, without its head). ``output_key``: the key the output was given as."""
    if not nodes:
        raise ConfigError(f"{path}.nodes", "a graph needs at least one node")
    configs: dict[str, NodeConfig] = {}
    for key, spec in nodes.items():
        name = str(key)
        _check_node_name(name, path)
        node_path = f"{path}.nodes.{name}"
        check_type(spec, Mapping, node_path, hint="a node is a mapping {block, args, inputs, ...}")
        node = validate(dict(spec), NodeConfig, node_path, f"graph node {name!r}")
        if isinstance(node.repeat, int):
            require_positive(node.repeat, f"{node_path}.repeat")
        is_block(node.block, f"{node_path}.block")
        configs[name] = node
    inputs = _node_inputs(configs, path)
    several = isinstance(output, (list, tuple))
    raw_out = list(output) if several else [output if output is not None else list(configs)[-1]]
    out_refs = []
    for i, text in enumerate(raw_out):
        where = f"{path}.{output_key}[{i}]" if several else f"{path}.{output_key}"
        ref = parse_ref(text, where)
        if ref.node not in configs:
            raise ConfigError(where, f"{ref.node!r} is not a node", allowed=list(configs),
                              suggestions=closest_names(ref.node, configs))
        out_refs.append(ref)
    order = _topological_order(inputs, path)
    if prune:
        needed = _needed(inputs, out_refs)
        configs = {n: c for n, c in configs.items() if n in needed}
        inputs = {n: refs for n, refs in inputs.items() if n in needed}
        order = [n for n in order if n in needed]
    read = {r.node for refs in inputs.values() for r in refs} | {r.node for r in out_refs}
    unused = [n for n in configs if n not in read]
    if unused:
        raise ConfigError(f"{path}.nodes", f"nodes {unused} feed nothing and would never be trained",
                          hint=f"wire them into the graph or remove them; the output is {', '.join(map(str, out_refs))}")
    return NodeTable(configs, inputs, order, out_refs, several, path)


def _needed(inputs: Mapping[str, list[Ref]], outputs: list[Ref]) -> set[str]:
    """The nodes the outputs read, directly or through other nodes."""
    needed: set[str] = set()
    stack = [r.node for r in outputs]
    while stack:
        name = stack.pop()
        if name != INPUT and name not in needed:
            needed.add(name)
            stack.extend(r.node for r in inputs[name])
    return needed


def parse_blocks(blocks: Mapping[Any, Any] | None, path: str) -> dict[str, Composite]:
    """Check a model's composite blocks (``model.blocks``): each table, and no cycle between them."""
    raw = {str(k): v for k, v in (blocks or {}).items()}
    composites: dict[str, Composite] = {}

    def is_block(name: str, where: str) -> None:
        if name not in raw:
            resolve_block(name, where, composites=raw)

    for name, spec in raw.items():
        where = f"{path}.blocks.{name}"
        if name in BLOCKS:
            raise ConfigError(where, f"composite {name!r} has the name of a registered block",
                              hint="give the composite a name of its own (`list blocks` shows the taken ones)")
        check_type(spec, Mapping, where, hint="a block is a mapping {params, nodes, output, description}")
        config = validate(dict(spec), CompositeConfig, where, f"composite block {name!r}")
        config.params = {str(k): v for k, v in (config.params or {}).items()}
        if config.repeats is not None and config.repeats not in config.params:
            raise ConfigError(f"{where}.repeats", f"{config.repeats!r} is not a parameter of {name!r}",
                              allowed=list(config.params), suggestions=closest_names(config.repeats, config.params))
        config.widths = [str(w) for w in config.widths or []]
        for i, width in enumerate(config.widths):
            if width not in config.params:
                raise ConfigError(f"{where}.widths[{i}]", f"{width!r} is not a parameter of {name!r}",
                                  allowed=list(config.params), suggestions=closest_names(width, config.params))
        composites[name] = Composite(name, config, parse_table(config.nodes, config.output, where, is_block), where)
    _check_no_cycle(composites)
    return composites


def _check_no_cycle(composites: Mapping[str, Composite]) -> None:
    state: dict[str, str] = {}

    def visit(name: str, trail: list[tuple[str, str]]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            names = [n for n, _ in trail]
            cycle = names[names.index(name):] + [name]
            raise ConfigError(trail[-1][1], f"composite blocks use each other in a cycle: {' -> '.join(cycle)}",
                              hint="a composite may use itself (or one that uses it) only in a node with a `when`, "
                                   "which ends the recursion")
        state[name] = "visiting"
        table = composites[name].table
        for node_name, node in table.nodes.items():
            # A use under `when` may recurse (a U-Net's next level, while sizes are left): the condition ends it,
            # and a recursion that never ends stops at MAX_NESTING levels (graph_bounds).
            if node.block in composites and node.when is None:
                visit(node.block, trail + [(name, f"{table.path}.nodes.{node_name}.block")])
        state[name] = "done"

    for name in composites:
        visit(name, [])
