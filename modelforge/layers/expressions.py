"""Arithmetic on block parameters, parsed with ``ast`` and never ``eval``'d.

A string argument in a graph node may be an expression over the parameters in
scope (``out_channels * expansion``, ``out_channels // 2``, ``2 if index == 0
else 1``). The grammar is deliberately tiny: integer and float literals,
``true``/``false``/``null``, parameter names, ``+ - * // %``, unary minus,
comparisons, ``and``/``or``/``not``, ``x if c else y``, and the calls ``min``
and ``max`` (of numbers, or of a list parameter's: ``min(input_size)``, the
shorter side of the image). Anything else (attributes, subscripts, other calls, ``/``, ``**``)
is an error naming the expression, so a config can never run code.

A string with neither a parameter nor a number in it (``relu``, ``max``,
``nn.GELU``) is a plain string, so arguments such as ``activation: relu`` keep
their meaning.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Mapping
from typing import Any

from modelforge.errors import ConfigError, closest_names

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_CALLS = {"min": min, "max": max}
_CONSTANTS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
ALLOWED = ("integer literals, parameter names, + - * // %, comparisons, and/or/not, "
           "'a if cond else b', min(...), max(...)")


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
    if isinstance(tree, ast.Name) and tree.id not in names and tree.id not in _CONSTANTS:
        close = closest_names(tree.id, names)
        if close:
            raise ConfigError(path, f"{text!r} is not a parameter here", suggestions=close,
                              allowed=sorted(names), hint=f"to pass the word {text!r} itself, quote it: \"'{text}'\"")
        return text
    numbers, words = _numbers_and_names(tree)
    if not numbers and not any(word in names or word in _CALLS for word in words):
        return text  # words and punctuation without a parameter or a number: "leaky-relu", "nn.GELU"
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
    return _evaluate_tree(tree, text, names, path)


def _evaluate_tree(tree: ast.expr, text: str, names: Mapping[str, Any], path: str) -> Any:

    def fail(problem: str, **extra: Any) -> ConfigError:
        return ConfigError(path, f"expression {text!r}: {problem}", **extra)

    def number(node: ast.expr) -> Any:
        value = walk(node)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(f"{ast.unparse(node)!r} is {value!r}, not a number")
        return value

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
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
                raise fail("division by zero")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -number(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not walk(node.operand)
        if isinstance(node, ast.BoolOp):
            values = [walk(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            left = walk(node.left)
            for op, comparator in zip(node.ops, node.comparators):
                right = walk(comparator)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return walk(node.body) if walk(node.test) else walk(node.orelse)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS
                and node.args and not node.keywords):
            values: list[Any] = []
            for arg in node.args:
                value = walk(arg)
                values.extend(value if isinstance(value, list) else [value])
            if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
                raise fail(f"{node.func.id} takes numbers or a list of numbers, got {values!r}")
            return _CALLS[node.func.id](*values)
        raise fail(f"{ast.unparse(node)!r} is not allowed", allowed=ALLOWED)

    return walk(tree)


def resolve_args(value: Any, names: Mapping[str, Any], path: str) -> Any:
    """``value`` with every expression string in it (in nested lists and mappings too) evaluated."""
    if isinstance(value, str):
        return resolve_string(value, names, path)
    if isinstance(value, Mapping):
        return {k: resolve_args(v, names, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [resolve_args(v, names, f"{path}[{i}]") for i, v in enumerate(value)]
    return value
