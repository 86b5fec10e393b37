"""Arithmetic on block parameters, parsed with ``ast`` and never ``eval``'d.

A string argument in a graph node may be an expression over the parameters in
scope (``out_channels * expansion``, ``out_channels // 2``, ``2 if index == 0
else 1``). The grammar is deliberately tiny: integer and float literals,
``true``/``false``/``null``, parameter names, ``+ - * / // %`` (``/`` gives a float:
a probability ``drop_path * index / 11``, never a width), unary minus,
``**`` (a power: ``(2 * window - 1) ** 2``, ``dim ** -0.5``), comparisons, ``and``/``or``/``not``,
``x if c else y``, the calls ``min`` and ``max`` (of numbers, or of a list parameter's:
``min(input_size)``, the shorter side of the image), ``len`` of a list parameter (a U-Net's levels), ``sqrt``,
``exp``, ``log`` (natural), ``abs``, ``floor``, ``ceil`` and ``round`` (a whole number; with a second argument,
the multiple of that divisor: ``round(w, 8)``, RegNet's and MNASNet's width rules) and one entry of a list
parameter (``input_size[0]``, the height; ``input_shape[-1]``, the last size). Anything else (attributes, other
calls, slices) is an error naming the expression, so a config can never run code.

``lambda i, j: <expression>`` is a formula per element, not a number: it becomes an
:class:`ElementFormula` that a ``constant`` block evaluates over its shape, its
arguments bound to each element's index along each dimension (the same grammar, on
whole tensors at once; a comparison gives 1 or 0 when added or multiplied, as in Python).

A string with neither a parameter nor a number in it (``relu``, ``max``,
``nn.GELU``) is a plain string, so arguments such as ``activation: relu`` keep
their meaning.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from modelforge.config_types import fits
from modelforge.errors import ConfigError, closest_names

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_CALLS = {"min": min, "max": max}
# one number in, one out; on a formula's index tensors, torch's of the same name
_MATH: dict[str, Callable[[Any], Any]] = {"sqrt": math.sqrt, "exp": math.exp, "log": math.log, "abs": abs}
_TENSOR_MATH: dict[str, Callable[[Tensor], Tensor]] = {"sqrt": torch.sqrt, "exp": torch.exp, "log": torch.log,
                                                       "abs": torch.abs}
# a whole number (Python's round: halves to even, as torch.round); with a divisor, that multiple of it
_ROUNDING: dict[str, Callable[[Any], int]] = {"floor": math.floor, "ceil": math.ceil, "round": round}
_TENSOR_ROUNDING: dict[str, Callable[[Tensor], Tensor]] = {"floor": torch.floor, "ceil": torch.ceil,
                                                           "round": torch.round}
_FUNCTIONS = frozenset({*_CALLS, *_MATH, *_ROUNDING})
MAX_POWER_BITS = 1024  # an integer power's size at most: '10 ** 10 ** 10' must not hang the config check
_CONSTANTS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
ALLOWED = ("integer literals, parameter names, + - * / // % **, comparisons, and/or/not, "
           "'a if cond else b', min(...), max(...), len(a list), sqrt, exp, log, abs, floor/ceil/round(x) or "
           "(x, divisor), a list parameter's entry (input_size[0])")
_TENSOR_COMPARE = {ast.Eq: torch.eq, ast.NotEq: torch.ne, ast.Lt: torch.lt, ast.LtE: torch.le,
                   ast.Gt: torch.gt, ast.GtE: torch.ge}


@dataclass(frozen=True)
class ElementFormula:
    """``lambda i, j: ...`` from a config: a value per element of a tensor, from the element's indices.

    ``names`` are the parameters in scope where it was written (plain numbers and lists); the
    formula is evaluated by the same walker as every expression, on index tensors.
    """

    args: tuple[str, ...]
    body: str
    names: tuple[tuple[str, Any], ...]
    path: str

    def over(self, shape: list[int]) -> Tensor:
        """The formula's value at every index of ``shape`` (one argument per dimension)."""
        if len(shape) != len(self.args):
            raise ConfigError(self.path, f"formula 'lambda {', '.join(self.args)}: ...' takes {len(self.args)} "
                              f"indices, but the tensor has {len(shape)} dimensions {shape}",
                              allowed="one argument per dimension of the shape")
        grids = {arg: torch.arange(size).view([size if d == k else 1 for d in range(len(shape))])
                 for k, (arg, size) in enumerate(zip(self.args, shape))}
        tree = _parse(self.body)
        assert tree is not None  # parsed when the formula was made
        value = _evaluate_tree(tree, self.body, {**dict(self.names), **grids}, self.path)
        if not isinstance(value, Tensor):
            value = torch.tensor(value)
        return value.expand(shape).clone()

    def __str__(self) -> str:
        return f"lambda {', '.join(self.args)}: {self.body}"


@functools.lru_cache(maxsize=4096)  # a graph parses the same few argument strings at every node
def _parse(text: str) -> ast.expr | None:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None


def resolve_string(text: str, names: Mapping[str, Any], path: str) -> Any:
    """A string argument's value: an expression is evaluated, a plain word stays a string.

    A lone word that is not a parameter but looks like one (``out_chanels``) is an error with
    did-you-mean rather than a string that fails later inside torch; quote it (``"'zeros'"``)
    to pass such a word on as a string.
    """
    tree = _parse(text)
    if tree is None:
        return text
    if isinstance(tree, ast.Constant):
        return tree.value if isinstance(tree.value, str) else text
    if isinstance(tree, ast.Lambda):
        return _evaluate_tree(tree, text, names, path)
    if isinstance(tree, ast.Name) and tree.id in names:  # most arguments of a composite's parts: a parameter
        return names[tree.id]
    if isinstance(tree, ast.Name) and tree.id not in _CONSTANTS:
        close = closest_names(tree.id, names)
        if close:
            raise ConfigError(path, f"{text!r} is not a parameter here", suggestions=close,
                              allowed=sorted(names), hint=f"to pass the word {text!r} itself, quote it: \"'{text}'\"")
        return text
    numbers, words = _numbers_and_names(tree)
    if not numbers and not any(word in names or word in _FUNCTIONS for word in words):
        return text  # words and punctuation without a parameter or a number: "leaky-relu", "nn.GELU"
    return _evaluated(tree, text, words, names, path)


def _evaluated(tree: ast.expr, text: str, words: frozenset[str], names: Mapping[str, Any], path: str) -> Any:
    """:func:`_evaluate_tree`, or the value it gave for the same names' values."""
    key = _evaluation_key(text, words, names)
    if key in _EVALUATED:
        return _EVALUATED[key]
    value = _evaluate_tree(tree, text, names, path)
    if key is not None and (value is None or isinstance(value, (bool, int, float, str))):
        if len(_EVALUATED) >= 4096:
            _EVALUATED.clear()
        _EVALUATED[key] = value
    return value


# An expression's value from the values of the names it reads: a graph evaluates the same few expressions with
# the same parameters at every copy of a block (numbers and words only; an error is never stored).
_EVALUATED: dict[tuple[Any, ...], Any] = {}


def _evaluation_key(text: str, words: frozenset[str], names: Mapping[str, Any]) -> tuple[Any, ...] | None:
    read = []
    for word in sorted(words):
        value = names.get(word, _CONSTANTS.get(word))
        if isinstance(value, list):
            value = tuple(value)
        if not (value is None or isinstance(value, (bool, int, float, str, tuple))):
            return None
        read.append((word, word in names, type(value).__name__, value))
    key = (text, *read)
    try:
        hash(key)
    except TypeError:  # a list inside a list
        return None
    return key


@functools.lru_cache(maxsize=4096)  # of a parsed (cached) tree: asked at every node
def _numbers_and_names(tree: ast.expr) -> tuple[bool, frozenset[str]]:
    """Whether an expression holds a number, and the names it holds."""
    nodes = list(ast.walk(tree))
    return (any(isinstance(n, ast.Constant) and not isinstance(n.value, str) for n in nodes),
            frozenset(n.id for n in nodes if isinstance(n, ast.Name)))


def names_in(value: Any) -> set[str]:
    """The parameter names an argument's expressions mention (none for a number or a plain word)."""
    if isinstance(value, Mapping):
        return set().union(*(names_in(v) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*(names_in(v) for v in value))
    tree = _parse(value) if isinstance(value, str) else None
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} if tree is not None else set()


def evaluate(text: str, names: Mapping[str, Any], path: str) -> Any:
    """The value of expression ``text`` with ``names`` in scope; errors name ``path`` and the text."""
    tree = _parse(text)
    if tree is None:
        raise ConfigError(path, f"cannot parse expression {text!r}", allowed=ALLOWED)
    if isinstance(tree, ast.Lambda):
        return _evaluate_tree(tree, text, names, path)
    return _evaluated(tree, text, _numbers_and_names(tree)[1], names, path)


def _evaluate_tree(tree: ast.expr, text: str, names: Mapping[str, Any], path: str) -> Any:

    def fail(problem: str, **extra: Any) -> ConfigError:
        return ConfigError(path, f"expression {text!r}: {problem}", **extra)

    def number(node: ast.expr) -> Any:
        value = walk(node)
        if isinstance(value, Tensor):  # inside a formula: a comparison counts as 1 or 0, as in Python
            return value.long() if value.dtype == torch.bool else value
        if not fits(value, float, path):
            raise fail(f"{ast.unparse(node)!r} is {value!r}, not a number")
        return value

    def truth(value: Any) -> Any:
        return value.bool() if isinstance(value, Tensor) else bool(value)

    def walk(node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in names:
                return names[node.id]
            if node.id in _CONSTANTS:
                return _CONSTANTS[node.id]
            raise fail(f"unknown parameter {node.id!r}", allowed=sorted(names) or "no parameters here",
                       suggestions=closest_names(node.id, names))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = number(node.left), number(node.right)
            zero = (right == 0).any() if isinstance(right, Tensor) else right == 0
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and bool(zero):
                raise fail("division by zero")
            if isinstance(node.op, ast.Pow):
                return power(left, right)
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -number(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            value = walk(node.operand)
            return value.logical_not() if isinstance(value, Tensor) else not value
        if isinstance(node, ast.BoolOp):
            values = [walk(v) for v in node.values]
            if any(isinstance(v, Tensor) for v in values):
                combine = torch.logical_and if isinstance(node.op, ast.And) else torch.logical_or
                out = truth(values[0])
                for v in values[1:]:
                    out = combine(out, torch.as_tensor(truth(v)))
                return out
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            left, result = walk(node.left), True
            for op, comparator in zip(node.ops, node.comparators):
                right = walk(comparator)
                if isinstance(left, Tensor) or isinstance(right, Tensor):
                    result = torch.logical_and(torch.as_tensor(result), _TENSOR_COMPARE[type(op)](
                        torch.as_tensor(left), torch.as_tensor(right)))
                elif not _COMPARE[type(op)](left, right):
                    return False if not isinstance(result, Tensor) else torch.zeros_like(result)
                left = right
            return result
        if isinstance(node, ast.IfExp):
            test = walk(node.test)
            if isinstance(test, Tensor):
                return torch.where(test.bool(), torch.as_tensor(walk(node.body)), torch.as_tensor(walk(node.orelse)))
            return walk(node.body) if test else walk(node.orelse)
        if isinstance(node, ast.Subscript):
            return entry(node)
        if isinstance(node, ast.Lambda):
            return formula(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords and (
                node.func.id in _MATH or node.func.id in _ROUNDING):
            return function(node)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"
                and len(node.args) == 1 and not node.keywords):  # a list parameter's length: a U-Net's levels
            value = walk(node.args[0])
            if not isinstance(value, (list, tuple)):
                raise fail(f"len takes a list, got {value!r}")
            return len(value)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS
                and node.args and not node.keywords):
            values: list[Any] = []
            for arg in node.args:
                value = walk(arg)
                values.extend(value if isinstance(value, list) else [value])
            if any(isinstance(v, Tensor) for v in values):  # inside a formula: element by element
                pick = torch.minimum if node.func.id == "min" else torch.maximum
                out = torch.as_tensor(values[0])
                for v in values[1:]:
                    out = pick(out, torch.as_tensor(v))
                return out
            if not values or not all(fits(v, float, path) for v in values):
                raise fail(f"{node.func.id} takes numbers or a list of numbers, got {values!r}")
            return _CALLS[node.func.id](*values)
        raise fail(f"{ast.unparse(node)!r} is not allowed", allowed=ALLOWED)

    def power(base: Any, exponent: Any) -> Any:
        if isinstance(base, Tensor) or isinstance(exponent, Tensor):
            return torch.as_tensor(base) ** exponent
        if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and \
                exponent * math.log2(abs(base)) > MAX_POWER_BITS:
            raise fail(f"{base} ** {exponent} is too large", allowed=f"whole numbers up to 2 ** {MAX_POWER_BITS}")
        if base == 0 and exponent < 0:
            raise fail("division by zero (0 to a negative power)")
        try:
            value = base ** exponent
        except OverflowError:
            raise fail("the result is too large") from None
        if isinstance(value, complex):
            raise fail(f"({base!r}) ** {exponent!r} is not a real number")
        return value

    def function(node: ast.Call) -> Any:
        """``sqrt(x)``, ``exp``, ``log``, ``abs``; ``floor(x)``, ``ceil``, ``round`` or with a divisor ``(x, d)``."""
        name = node.func.id  # type: ignore[attr-defined]
        rounding = name in _ROUNDING
        if len(node.args) != 1 and not (rounding and len(node.args) == 2):
            raise fail(f"{name} takes {'one number, or a number and a divisor' if rounding else 'one number'}, "
                       f"got {len(node.args)} arguments")
        value = number(node.args[0])
        divisor = number(node.args[1]) if len(node.args) == 2 else 1
        if isinstance(divisor, Tensor) or divisor <= 0:
            raise fail(f"{name}'s divisor is {ast.unparse(node.args[1])!r} = {divisor!r}", allowed="a number > 0")
        if isinstance(value, Tensor):
            if rounding:
                whole = _TENSOR_ROUNDING[name]
                return whole(value / divisor) * divisor if divisor != 1 else whole(value)
            return _TENSOR_MATH[name](value if value.is_floating_point() else value.to(torch.get_default_dtype()))
        if rounding:
            whole = _ROUNDING[name](value / divisor if divisor != 1 else value) * divisor
            return int(whole) if isinstance(whole, float) and whole.is_integer() else whole
        try:
            return _MATH[name](value)
        except ValueError:
            raise fail(f"{name}({value!r}) is not a real number", allowed=f"{name} of a number > 0"
                       if name == "log" else f"{name} of a number >= 0") from None
        except OverflowError:
            raise fail(f"{name}({value!r}) is too large") from None

    def entry(node: ast.Subscript) -> Any:
        """``input_size[0]``: one entry of a list (a negative index counts from the end)."""
        values = walk(node.value)
        if isinstance(node.slice, ast.Slice) or not isinstance(values, (list, tuple)):
            what = "a slice" if isinstance(node.slice, ast.Slice) else f"{ast.unparse(node.value)!r} is {values!r}"
            raise fail(f"{what}: only one entry of a list parameter can be read",
                       allowed="name[i] of a list parameter, i a whole number (input_size[0], input_shape[-1])")
        index = walk(node.slice)
        if not fits(index, int, path):
            raise fail(f"the index {ast.unparse(node.slice)!r} is {index!r}, not a whole number")
        if not -len(values) <= index < len(values):
            raise fail(f"{ast.unparse(node.value)} has {len(values)} entries {list(values)}; there is no entry {index}")
        return values[index]

    def formula(node: ast.Lambda) -> ElementFormula:
        """``lambda i, j: ...``: checked now (its names), evaluated per element by whoever takes it."""
        spec = node.args
        if spec.posonlyargs or spec.vararg or spec.kwonlyargs or spec.kwarg or spec.defaults or not spec.args:
            raise fail("a formula names its indices and nothing else", allowed="lambda i, j: <expression>")
        args = tuple(a.arg for a in spec.args)
        known = {*names, *args, *_CONSTANTS, *_FUNCTIONS}
        for n in ast.walk(node.body):
            if isinstance(n, ast.Name) and n.id not in known:
                raise fail(f"unknown name {n.id!r}", allowed=[*args, *sorted(names)],
                           suggestions=closest_names(n.id, [*args, *names]))
            if isinstance(n, ast.Lambda):
                raise fail("a formula cannot hold another formula")
        plain = tuple((k, v) for k, v in names.items() if isinstance(v, (int, float, bool, list, tuple)))
        return ElementFormula(args, ast.unparse(node.body), plain, path)

    return walk(tree)


_PLAIN = (int, float, type(None))  # bool is an int


def resolve_args(value: Any, names: Mapping[str, Any], path: str) -> Any:
    """``value`` with every expression string in it (in nested lists and mappings too) evaluated."""
    if isinstance(value, str):
        return resolve_string(value, names, path)
    if isinstance(value, Mapping):  # a graph resolves every node's arguments: numbers skip the call
        return {k: v if isinstance(v, _PLAIN) else resolve_args(v, names, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [v if isinstance(v, _PLAIN) else resolve_args(v, names, f"{path}[{i}]") for i, v in enumerate(value)]
    return value
