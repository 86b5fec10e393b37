"""Bounds on the size of a graph model, checked before anything is built.

A ``repeat`` count and the total number of nodes (every block and composite instance, a
composite's parts and every copy counted) are capped by the model options ``max_repeat`` and
``max_nodes``, so a typo (``repeat: 1000000000``) is one error in milliseconds instead of a build
that grows until the machine gives out. The count is made from the node tables alone: repeat
counts are evaluated where their names are known without building (the model's parameters, a
composite's arguments written as numbers or expressions of them); a node left out by ``when`` is
counted too, so the count is an upper bound. What cannot be known before building (a repeat
count written from a width) is checked again as the graph is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelforge.config import require_positive
from modelforge.config_types import check_type
from modelforge.errors import ConfigError
from modelforge.layers.expressions import evaluate, resolve_args
from modelforge.models.graph_spec import REQUIRED, Composite, NodeConfig, NodeTable
from modelforge.models.scales import Scale

MAX_REPEAT = 1_000  # ViT-G has 48 layers, YOLOv8-x's deepest C2f 6 bottlenecks
MAX_NODES = 10_000  # ResNet-152 is about 400 nodes here, EfficientNet-B7 under 1,000


@dataclass(frozen=True)
class Bounds:
    """The caps and the model options that set them (``path``: the model config's path)."""

    max_repeat: int = MAX_REPEAT
    max_nodes: int = MAX_NODES
    path: str = "model"

    def check_repeat(self, count: int, path: str) -> None:
        """A node's repeat count, once known, within ``max_repeat``."""
        if count > self.max_repeat:
            raise ConfigError(path, f"{count:,} copies is more than {self.path}.max_repeat ({self.max_repeat:,})",
                              hint=f"set {self.path}.max_repeat={count} if the model really has that many")

    def check_nodes(self, total: int, path: str, detail: str = "") -> None:
        """A node count (``detail``: where most of it comes from) within ``max_nodes``."""
        if total > self.max_nodes:
            raise ConfigError(path, f"the model would have {total:,} nodes{detail}, "
                              f"more than {self.path}.max_nodes ({self.max_nodes:,})",
                              hint=f"set {self.path}.max_nodes={total} if the model really has that many")

    def check_built(self, built: int, path: str) -> None:
        """The nodes built so far within ``max_nodes`` (for counts the tables alone could not give)."""
        if built > self.max_nodes:
            raise ConfigError(path, f"the model has more than {self.path}.max_nodes ({self.max_nodes:,}) nodes",
                              hint=f"set {self.path}.max_nodes to more if the model really has that many")


def repeat_count(node: NodeConfig, names: Mapping[str, Any], path: str) -> int | None:
    """A node's ``repeat`` as written (None: the node is not repeated), evaluated and checked to be >= 1."""
    if node.repeat is None:
        return None
    count = evaluate(node.repeat, names, f"{path}.repeat") if isinstance(node.repeat, str) else node.repeat
    check_type(count, int, f"{path}.repeat", written=node.repeat)
    require_positive(count, f"{path}.repeat")
    return count


# Composites inside composites, at most: a recursive composite (its use under a `when`) that never ends stops here.
MAX_NESTING = 32


def check_nesting(depth: int, path: str) -> None:
    """Refuse composites nested deeper than MAX_NESTING: a recursion whose `when` never turns false."""
    if depth > MAX_NESTING:
        raise ConfigError(path, f"composites nest more than {MAX_NESTING} levels deep: a composite that uses itself "
                          "must stop, with a `when` that turns false", hint="check the `when` of its recursive node")


def check_size(table: NodeTable, composites: Mapping[str, Composite], names: Mapping[str, Any], scale: Scale,
               bounds: Bounds) -> None:
    """Refuse a model whose repeats or node count exceed ``bounds``, from its tables alone."""
    fixed_sizes: dict[str, int] = {}  # composites without a repeat inside: one size, whatever their arguments
    sizes = {name: _node_size(table, name, composites, names, scale, bounds, True, fixed_sizes) for name in table.order}
    biggest = max(sizes, key=sizes.__getitem__)
    bounds.check_nodes(sum(sizes.values()), f"{table.path}.nodes.{biggest}",
                       f" (up to {sizes[biggest]:,} from node {biggest!r} and its copies and parts)")


def _node_size(table: NodeTable, name: str, composites: Mapping[str, Composite], names: Mapping[str, Any],
               scale: Scale, bounds: Bounds, top: bool, fixed_sizes: dict[str, int], depth: int = 0) -> int:
    """How many nodes one node of ``table`` builds, copies and composite parts included (an upper bound);
    ``fixed_sizes``: the parts of the composites whose size their arguments do not change, as they are counted."""
    node, path = table.nodes[name], f"{table.path}.nodes.{name}"
    try:
        count = repeat_count(node, names, path)
    except ConfigError:
        if top:
            raise  # the build would fail the same way: say it now
        count = None  # a name known only once built (a width): checked while building
    if count is not None and top:
        count = scale.repeats(count)
    if count is not None:
        bounds.check_repeat(count, f"{path}.repeat")
    composite = composites.get(node.block)
    if composite is None:
        return count or 1
    if node.when is not None and not top:  # a recursive composite's use: counted while its condition holds
        try:
            if not (node.when if isinstance(node.when, bool) else evaluate(node.when, names, f"{path}.when")):
                return 0
        except ConfigError:
            pass  # a name known only once built: an upper bound, bounded by the nesting
    check_nesting(depth + 1, path)
    fixed = {}
    if composite.config.repeats and count is not None:
        fixed, count = {composite.config.repeats: count}, None  # the count goes inside (C2f's bottlenecks)
    inner = fixed_sizes.get(composite.name)
    if inner is None:
        scope = _composite_scope(composite, node, names, fixed)
        inner = sum(_node_size(composite.table, part, composites, scope, scale, bounds, False, fixed_sizes, depth + 1)
                    for part in composite.table.order)
        if not _repeats_inside(composite, composites):
            fixed_sizes[composite.name] = inner
    return (count or 1) * (1 + inner)


def _repeats_inside(composite: Composite, composites: Mapping[str, Composite], seen: frozenset[str] = frozenset()) -> bool:
    """Whether a node of ``composite``, or of a composite it uses, repeats or recurses (its size then depends on
    arguments)."""
    for node in composite.table.nodes.values():
        if node.repeat is not None:
            return True
        inner = composites.get(node.block)
        if inner is not None and (inner.name in seen | {composite.name}
                                  or _repeats_inside(inner, composites, seen | {composite.name})):
            return True
    return False


def _composite_scope(composite: Composite, node: NodeConfig, names: Mapping[str, Any],
                     fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The composite's parameters that are known without building (arguments of a width are not)."""
    args: dict[str, Any] = dict(fixed)
    for key, value in node.args.items():
        try:
            args.setdefault(key, resolve_args(value, {**names, "index": 0}, ""))
        except ConfigError:
            pass
    scope: dict[str, Any] = {}
    for key, default in composite.config.params.items():
        if key in args:
            scope[key] = args[key]
        elif default != REQUIRED:
            try:
                scope[key] = resolve_args(default, scope, "")
            except ConfigError:
                pass
    return scope
