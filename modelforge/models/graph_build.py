"""The dynamic half of the model language: a checked node table becomes modules.

Nodes are built in order, each from the outputs of the nodes before it (a dry
run on a batch without samples: :mod:`modelforge.models.graph_dry_run`), so widths
are inferred from shapes and every shape problem is found while building, naming
the node. A composite block is built by the same code as the model's own table,
one level down: no special path for widths, repeats, names or errors. Each node
is built and run once, so building is linear in the number of nodes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from modelforge.errors import ConfigError, ModelforgeError, UnknownKeyError
from modelforge.layers.batch_dim import check_batch_dim, output_has_batch_first
from modelforge.layers.expressions import evaluate, names_in, resolve_args
from modelforge.layers.kwargs import check_arg_types, check_kwargs
from modelforge.layers.macs import counts_from_children
from modelforge.layers.torch_nn import infer_widths, resolve_block
from modelforge.models.graph_bounds import Bounds, check_nesting, repeat_count
from modelforge.models.graph_dry_run import DryRun
from modelforge.models.graph_resize import SizedFor, reads_input_shape
from modelforge.models.graph_spec import (
    INPUT,
    REQUIRED,
    Composite,
    NodeConfig,
    NodeTable,
    Ref,
)
from modelforge.models.scales import CLASS_COUNT, IDENTITY, WIDTH_ARG, Scale, scale_widths
from modelforge.models.shapes import describe_dry, shown_shape

Source = tuple[str, tuple[int, ...]]  # a node (or "input") and the indices into its output


def source_label(source: Source, n_inputs: int = 1) -> str:
    """``stem``, ``lstm.0``, ``input`` (the only input), ``input.1``; a repeated node's last copy reads as itself."""
    node, index = source
    if index[:1] == (-1,) or (node == INPUT and n_inputs == 1 and index[:1] == (0,)):
        index = index[1:]
    return ".".join([node, *map(str, index)])


def _pick(values: Mapping[str, Any], source: Source) -> Any:
    value = values[source[0]]
    for i in source[1]:
        value = value[i]
    return value


@counts_from_children
class Graph(nn.ModuleDict):
    """Runs its nodes in order, each on the outputs its ``wiring`` names; a composite block is one."""

    def __init__(self, nodes: dict[str, nn.Module], wiring: dict[str, list[Source]], output: list[Source],
                 several_outputs: bool = False, block: str = "graph", n_inputs: int = 1,
                 call_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__()
        # names checked when the graph was parsed (graph_spec._check_node_name): add_module's own checks cost a
        # failed attribute lookup (an exception) per node
        self._modules.update(nodes)
        # plain values, set as nn.Module.__setattr__ would set them (without its checks for tensors and modules:
        # a model holds a Graph per composite instance)
        vars(self).update(wiring=wiring, output=output, several_outputs=several_outputs, block=block,
                          n_inputs=n_inputs,
                          call_kwargs=call_kwargs or {},  # node -> keyword arguments of its forward (`kwargs`)
                          sized=None)  # a composite built for its input's size: graph_resize.SizedFor

    @property
    def composite_name(self) -> str | None:
        """The composite block this graph is an instance of (None for a model's own nodes)."""
        return None if self.block == "graph" else self.block

    def forward(self, *inputs: Any) -> Any:
        if self.sized is not None and not self.sized.fits(inputs):  # another size: the same weights, rebuilt there
            return self.sized.at_size(self, inputs)(*inputs)
        values: dict[str, Any] = {INPUT: inputs}
        for name, node in self.items():
            values[name] = node(*[_pick(values, source) for source in self.wiring[name]],
                                **self.call_kwargs.get(name, {}))
        if self.several_outputs:
            return tuple(_pick(values, source) for source in self.output)
        return _pick(values, self.output[0])

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        if self.sized is not None:  # moved or cast: the graphs rebuilt for other sizes are made again when needed
            self.sized.variants.clear()
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        def label(source: Source) -> str:
            return source_label(source, self.n_inputs)

        edges = ", ".join(f"{n} <- {'+'.join(map(label, s))}" for n, s in self.wiring.items())
        called = "".join(f", {n}(**{kw})" for n, kw in self.call_kwargs.items())
        return f"block={self.block}, output={'+'.join(map(label, self.output))}, edges: {edges}{called}"


@counts_from_children
class Repeat(nn.Sequential):
    """Copies of one block, chained; ``keep_all`` returns every copy's output (read as ``node.i``)."""

    def __init__(self, copies: list[nn.Module], keep_all: bool = False) -> None:
        super().__init__(*copies)
        self.keep_all = keep_all

    def forward(self, x: Tensor, **kwargs: Any) -> Any:
        outputs = []
        for copy in self:
            x = copy(x, **kwargs)
            outputs.append(x)
        return tuple(outputs) if self.keep_all else x


def _check_forward_kwargs(kind: type, n_inputs: int, kwargs: Mapping[str, Any], path: str, what: str) -> None:
    """A node's ``kwargs`` are keyword arguments its block's ``forward`` takes, beside the inputs it is given."""
    if not kwargs:
        return
    try:
        params = list(inspect.signature(kind.forward).parameters.values())[1 + n_inputs:]  # without self, inputs
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    allowed = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in kwargs:
        if key not in allowed:
            raise UnknownKeyError(f"{path}.{key}", key, f"the forward of {what} takes no keyword argument {key!r}"
                              + (f" beside its {n_inputs} input(s)" if n_inputs else ""), allowed, none="none")


class _Described:
    """A node's inputs as messages name them (``stem [2, 32, 28, 28]``), written only when a message needs them."""

    def __init__(self, labels: list[str], values: list[Any]) -> None:
        self.labels, self.values = labels, values

    def __str__(self) -> str:
        return ", ".join(f"{label} {describe_dry(v)}" for label, v in zip(self.labels, self.values))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


@functools.lru_cache(maxsize=1024)
def _max_inputs(kind: type) -> int | None:
    """How many tensors the ``forward`` of modules of this class takes at most (None: any number)."""
    try:
        params = list(inspect.signature(kind.forward).parameters.values())[1:]  # without self
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _check_inputs(name: str, block_name: str, block: nn.Module | type, labels: list[str], shapes: list[Any],
                  described: _Described | str, path: str) -> None:
    """The number of inputs a block's forward takes, and the shapes its ``check_shapes`` accepts."""
    most = _max_inputs(block if isinstance(block, type) else type(block))
    if most == 0 and labels:
        raise ConfigError(f"{path}.inputs", f"block {block_name!r} reads no input, got {len(labels)}",
                          hint="write inputs: [] for this node")
    if most is not None and len(labels) > most:
        raise ConfigError(f"{path}.inputs",
                          f"block {block_name!r} takes {'one input' if most == 1 else f'{most} inputs'}, "
                          f"got {len(labels)}", hint="merge several inputs with an 'add' or 'concat' node")
    if not labels and most != 0:
        raise ConfigError(f"{path}.inputs", f"node {name!r} reads no input, but block {block_name!r} needs one",
                          hint="remove `inputs: []` to read the node above, or name the nodes it reads")
    has_check = not isinstance(block, type) and hasattr(type(block), "check_shapes")  # a method: the class has it
    problem = block.check_shapes([list(s) for s in shapes]) if has_check and labels else None
    if problem:
        raise ConfigError(path, f"node {name!r} {problem} {described}")


# Arguments that are a block's width: a value of 0 or less there is refused at the node, naming the parameter
# it came from (torch's own words, "negative dimension", name neither).
_SIZE_ARGS = ("out_channels", "out_features")


class NonPositiveWidth(ConfigError):
    """A width of 0 or less reached a node; ``sources``: the names in scope that its expression read, mapped to the
    enclosing scope's names at each composite boundary, so the model's own parameter can be named at the top."""

    def __init__(self, path: str, problem: str, value: int, sources: set[str]) -> None:
        super().__init__(path, problem, allowed="integers >= 1")
        self.value, self.sources = value, sources


def _check_widths(name: str, block: str, args: Mapping[str, Any], raw: Mapping[str, Any], path: str) -> None:
    """A layer's width must be positive (a composite's own width parameters may be 0: "none", as a squeeze)."""
    for key in (k for k in args if k in _SIZE_ARGS):
        value = args[key]
        if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
            raise NonPositiveWidth(f"{path}.args.{key}", f"node {name!r} ({block}) gets {key}={value}: a width must "
                                   "be positive", value, names_in(raw.get(key)))


class GraphBuilder:
    """Builds node tables with the model's composites and scale; one builder per model."""

    def __init__(self, composites: Mapping[str, Composite], scale: Scale = IDENTITY, bounds: Bounds = Bounds(),
                 dry_run: DryRun | None = None) -> None:
        self.composites = composites
        self.scale = scale
        self.bounds = bounds
        self.built = 0  # nodes built so far, copies and composite parts included
        self.dry_run = dry_run or DryRun()  # makes each block and runs it on an empty batch: shapes, no arithmetic
        # a composite's table is built once per instance: its nodes' blocks are resolved and their argument names
        # checked once per build (the registries do not change while a model is built)
        self._factories: dict[str, Any] = {}
        self._names_checked: set[int] = set()  # id() of the NodeConfigs whose args' names were checked
        self._nesting = 0  # composites being built inside each other now

    def build(self, table: NodeTable, inputs: tuple[Any, ...], names: Mapping[str, Any], *,
              top: bool = False, block: str = "graph", batched: tuple[bool, ...] | None = None) -> tuple[Graph, Any]:
        """The table as a :class:`Graph`, and its output on ``inputs`` (the dry run).

        ``batched``: which inputs have a batch dimension (all unless told); so does every node that
        reads one, and no op may touch it (:mod:`modelforge.layers.batch_dim`).
        """
        keep_all = table.repeated_parts_read()
        values: dict[str, Any] = {INPUT: inputs}
        batched = batched if batched is not None else (True,) * len(inputs)
        has_batch: dict[str, tuple[bool, nn.Module]] = {}  # a node: whether its input has a batch, its module

        def batch_first(source: Source) -> bool:
            if source[0] == INPUT:
                return batched[source[1][0]]
            flag, module = has_batch[source[0]]
            return flag and output_has_batch_first(module, source[1])
        skipped: dict[str, Source] = {}
        modules: dict[str, nn.Module] = {}
        wiring: dict[str, list[Source]] = {}
        call_kwargs: dict[str, dict[str, Any]] = {}
        for name in table.order:
            node = table.nodes[name]
            node_path = f"{table.path}.nodes.{name}"
            sources = [s for i, ref in enumerate(table.inputs[name])
                       for s in self._sources(ref, values, skipped, keep_all, f"{node_path}.inputs[{i}]")]
            if self._left_out(name, node, names, sources, node_path):
                skipped[name] = sources[0]  # a node left out passes its first input on
                continue
            labels = [source_label(s, len(inputs)) for s in sources]
            in_batch = [batch_first(s) for s in sources]
            kwargs = resolve_args(node.kwargs or {}, names, f"{node_path}.kwargs")
            module, values[name] = self._node(name, node, labels, [_pick(values, s) for s in sources],
                                              names, top, name in keep_all, node_path, in_batch, kwargs)
            has_batch[name] = (any(in_batch), module)
            if not any(in_batch):  # a constant, a parameter, or work on them only: done once per call, whatever the
                module.batch_free = True  # batch (the MAC counter does not divide it by the batch size)
            modules[name] = module
            wiring[name] = sources
            if kwargs:
                call_kwargs[name] = kwargs
        output = [s for i, ref in enumerate(table.output)
                  for s in self._sources(ref, values, skipped, keep_all, f"{table.path}.output")]
        graph = Graph(modules, wiring, output, table.several_outputs, block, len(inputs), call_kwargs)
        result = tuple(_pick(values, s) for s in output) if table.several_outputs else _pick(values, output[0])
        return graph, result

    def _sources(self, ref: Ref, values: Mapping[str, Any], skipped: Mapping[str, Source],
                 keep_all: set[str], path: str) -> list[Source]:
        """Where a reference reads from, with skipped nodes followed and ``node.*`` expanded."""
        if ref.node in skipped:
            node, index = skipped[ref.node]
        elif ref.node == INPUT and not ref.index and not ref.every:
            n = len(values[INPUT])
            if n != 1:
                raise ConfigError(path, f"this block has {n} inputs; read one: " +
                                  ", ".join(f"input.{i}" for i in range(n)))
            node, index = INPUT, (0,)
        elif ref.node in keep_all and not ref.index and not ref.every:
            node, index = ref.node, (-1,)  # a repeated node read whole: its last copy
        else:
            node, index = ref.node, ()
        index = index + ref.index
        value = values[node]
        for i in index:
            if isinstance(value, Tensor):  # tensor[i] would index the batch dimension
                raise ConfigError(path, f"cannot read {str(ref)!r}: {ref.node!r} gives one tensor, not parts "
                                  f"({describe_dry(value)}); .N reads a part of a tuple",
                                  hint=f"read {ref.node!r} whole, or take a part of it with a select, chunk, split "
                                       "or unbind node")
            if not isinstance(value, (tuple, list)) or not -len(value) <= i < len(value):
                parts = f"{len(value)} parts" if isinstance(value, (tuple, list)) else "one value, not parts"
                raise ConfigError(path, f"cannot read {str(ref)!r}: {ref.node!r} gives {parts}")
            value = value[i]
        if not ref.every:
            return [(node, index)]
        if not isinstance(value, (tuple, list)):
            raise ConfigError(path, f"cannot read {str(ref)!r}: {ref.node!r} gives one tensor, not parts")
        return [(node, index + (i,)) for i in range(len(value))]

    def _left_out(self, name: str, node: NodeConfig, names: Mapping[str, Any], sources: list[Source],
                  path: str) -> bool:
        """A node whose ``when`` is false, or a block of the head (its arguments use ``n_classes``) when
        ``n_classes`` is null: a model without its head. A composite given a null class count leaves out its own."""
        if node.when is not None:
            return not bool(node.when if isinstance(node.when, bool) else evaluate(node.when, names, f"{path}.when"))
        headless = CLASS_COUNT in names and names[CLASS_COUNT] is None
        if not headless or node.block in self.composites or CLASS_COUNT not in names_in(node.args):
            return False
        if not sources:
            raise ConfigError(path, f"n_classes is null, which leaves out node {name!r} (its arguments use "
                              "n_classes), but it reads no input to pass on", hint="set n_classes, or give it an input")
        return True

    def _repeats(self, node: NodeConfig, names: Mapping[str, Any], top: bool, path: str) -> int | None:
        count = repeat_count(node, names, path)
        if count is not None:
            count = self.scale.repeats(count) if top else count
            self.bounds.check_repeat(count, f"{path}.repeat")
        return count

    def _node(self, name: str, node: NodeConfig, labels: list[str], inputs: list[Any], names: Mapping[str, Any],
              top: bool, keep_all: bool, path: str, batched: list[bool],
              call_kwargs: Mapping[str, Any]) -> tuple[nn.Module, Any]:
        """One node: a block, or ``repeat`` chained copies of it; its module and its dry-run output."""
        composite = self.composites.get(node.block)
        factory = None
        if composite is None:
            factory = self._factories.get(node.block) or self._factories.setdefault(
                node.block, resolve_block(node.block, f"{path}.block"))
            if id(node) not in self._names_checked:
                check_kwargs(factory, node.args, f"{path}.args", f"block {node.block!r}")
                self._names_checked.add(id(node))
        elif call_kwargs:
            raise ConfigError(f"{path}.kwargs", f"composite block {node.block!r} takes no forward keyword arguments",
                              hint="set them on the nodes inside the composite, or pass values as its args")
        elif not inputs:
            raise ConfigError(f"{path}.inputs", f"node {name!r} reads no input, but composite {node.block!r} needs one",
                              hint="remove `inputs: []` to read the node above, or name the nodes it reads")
        count = self._repeats(node, names, top, path)
        if count is not None and len(inputs) != 1:
            raise ConfigError(f"{path}.repeat", f"node {name!r} reads {len(inputs)} inputs; only a one-input node repeats")
        fixed_args: dict[str, Any] = {}
        if composite is not None and composite.config.repeats and count is not None:
            fixed_args[composite.config.repeats] = count  # the count goes inside (C2f's bottlenecks)
            count = None
        widths = (WIDTH_ARG, *(composite.config.widths if composite is not None else ()))
        copies, outputs = [], []
        for i in range(count or 1):
            self.built += 1
            self.bounds.check_built(self.built, path)
            scope = {**names, "index": i} if count is not None else names
            args = {**resolve_args(node.args, scope, f"{path}.args"), **fixed_args}
            if top:
                args = scale_widths(self.scale, args, node.args, widths)
            if factory is not None:
                _check_widths(name, node.block, args, node.args, path)
            copy_path = f"{path}[{i}]" if count is not None else path
            if factory is not None:
                check_arg_types(factory, args, f"{path}.args", node.args)
            if composite is not None:
                try:
                    module, out = self._composite(composite, args, inputs, path, copy_path, batched)
                except NonPositiveWidth as exc:  # the composite's parameters it read, as this scope wrote them
                    exc.sources = set().union(*(names_in(node.args[p]) for p in exc.sources if p in node.args))
                    raise
            else:
                module, out = self._block(name, node.block, factory, args, labels, inputs, path, batched, call_kwargs)
            if count is not None and i + 1 < count and not isinstance(out, Tensor):
                raise ConfigError(f"{path}.repeat", f"node {name!r} returns {describe_dry(out)}; "
                                  "only a block that returns one tensor chains into copies of itself")
            copies.append(module)
            outputs.append(out)
            inputs, labels, batched = [out], [name], [any(batched)]
        if count is None:
            return copies[0], outputs[0]
        return Repeat(copies, keep_all), tuple(outputs) if keep_all else outputs[-1]

    def _block(self, name: str, block_name: str, factory: Any, args: dict[str, Any], labels: list[str],
               inputs: list[Any], path: str, batched: list[bool],
               call_kwargs: Mapping[str, Any]) -> tuple[nn.Module, Any]:
        described = _Described(labels, inputs)
        shapes = [shown_shape(x) for x in inputs]
        tuples = [label for label, x in zip(labels, inputs) if isinstance(x, tuple)]
        tuple_hint = f"{tuples[0]} is a tuple: read one part, e.g. {tuples[0]}.0" if tuples else None
        if not inputs and isinstance(factory, type) and _max_inputs(factory) != 0:
            _check_inputs(name, block_name, factory, labels, shapes, described, path)  # before it fails unfed
        kwargs = infer_widths(factory, args, shapes)
        self.dry_run.check_size(factory, kwargs, path)  # before the block is allocated
        try:
            block = self.dry_run.make(factory, kwargs)
        except ConfigError as exc:  # a block of ours refusing an argument (a formula's error has its full path)
            absolute = exc.path.startswith(path.split(".", 1)[0] + ".")
            raise ConfigError(exc.path if absolute else f"{path}.args.{exc.path}" if exc.path else f"{path}.args",
                              f"node {name!r} ({block_name}): {exc.problem}", allowed=exc.allowed,
                              suggestions=exc.suggestions, hint=exc.hint) from None
        except (ModelforgeError, TypeError, ValueError, RuntimeError, AssertionError) as exc:  # torch.nn's own checks
            problem = (str(exc).splitlines() or [type(exc).__name__])[0]
            if tuples:  # widths are not inferred from a tuple: that is the problem to name
                problem = f"does not fit its input {described}: {problem}"
            raise ConfigError(path, f"node {name!r} ({block_name}){'' if tuples else ':'} {problem}",
                              hint=tuple_hint) from None
        _check_inputs(name, block_name, block, labels, shapes, described, path)
        _check_forward_kwargs(type(block), len(inputs), call_kwargs, f"{path}.kwargs", f"block {block_name!r}")
        if any(batched):
            check_batch_dim(block, shapes, [b and isinstance(x, Tensor) for x, b in zip(inputs, batched)], path,
                            f"node {name!r} ({block_name})", described)
        try:
            out = self.dry_run.run(block, inputs, call_kwargs)
        except (RuntimeError, TypeError, ValueError, IndexError, AttributeError, AssertionError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ConfigError(path, f"node {name!r} ({block_name}) does not fit its input {described}: {first}",
                              hint=tuple_hint) from None
        return block, out

    def _composite(self, composite: Composite, args: dict[str, Any], inputs: list[Any], node_path: str,
                   use_path: str, batched: list[bool]) -> tuple[Graph, Any]:
        """An instance of ``composite`` for the node at ``node_path`` (``use_path``: which copy)."""
        params = composite.config.params
        for key in args:
            if key not in params:
                raise UnknownKeyError(f"{node_path}.args.{key}", key, f"composite block {composite.name!r} has no "
                                  f"parameter {key!r}", params, none="no parameters")
        first = inputs[0] if inputs and isinstance(inputs[0], Tensor) else None
        scope: dict[str, Any] = {}
        if first is not None and first.dim() >= 2:
            scope["in_channels"] = first.shape[1]
        if first is not None:
            scope["in_features"] = first.shape[-1]
            scope["input_shape"] = list(first.shape[1:] if batched[0] else first.shape)  # without the batch
        if len(inputs) > 1:  # every input's shape: a pyramid's maps, each resized to the size of the next
            scope["input_shapes"] = [list(x.shape[1:] if b else x.shape) if isinstance(x, Tensor) else None
                                     for x, b in zip(inputs, batched)]
        for key, default in params.items():  # a default may be an expression of the parameters before it
            if key in args:
                scope[key] = args[key]
            elif default == REQUIRED:
                raise ConfigError(f"{node_path}.args.{key}", f"missing: composite block {composite.name!r} needs {key!r}",
                                  hint=f"its parameters: {', '.join(f'{k}={v}' for k, v in params.items())}")
            else:
                scope[key] = resolve_args(default, scope, f"{composite.path}.params.{key}")
        self._nesting += 1
        try:
            check_nesting(self._nesting, use_path)
            graph, out = self.build(composite.table, tuple(inputs), scope, block=composite.name, batched=tuple(batched))
        except NonPositiveWidth as exc:
            raise NonPositiveWidth(exc.path, f"{exc.problem} [in {use_path}]", exc.value, exc.sources) from None
        except ConfigError as exc:
            raise ConfigError(exc.path, f"{exc.problem} [in {use_path}]", allowed=exc.allowed,
                              suggestions=exc.suggestions, hint=exc.hint) from None
        finally:
            self._nesting -= 1
        if reads_input_shape(composite):
            rebuild = _Rebuild(self.composites, composite, args, node_path, use_path, tuple(batched))
            vars(graph)["sized"] = SizedFor(inputs, batched, rebuild, use_path)
        return graph, out


@dataclass(frozen=True)
class _Rebuild:
    """One composite instance built again for inputs of other sizes (a plain object: a model pickles whole)."""

    composites: Mapping[str, Composite]
    composite: Composite
    args: dict[str, Any]
    node_path: str
    use_path: str
    batched: tuple[bool, ...]

    def __call__(self, inputs: list[Any]) -> Graph:
        builder = GraphBuilder(self.composites)
        return builder._composite(self.composite, dict(self.args), inputs, self.node_path, self.use_path,
                                  list(self.batched))[0]
