"""What the program inside a ``.pt2`` (its ``models/model.json``) may say, checked before torch reads it.

torch's deserializer trusts that JSON: it resolves a node's ``target`` by ``getattr`` from ``torch``, ``math`` and
``operator`` (``torch.os.system`` is callable, so it becomes a graph call), parses shape expressions with
``sympy.sympify`` (an ``eval``), puts node names and attribute paths into Python source that it ``exec``s (FX
code generation, which quotes names unescaped), and ``exec``s the program's ``guards_code``. So every string is
held to what ``torch.export.save`` writes for a modelforge model, and anything else is refused with the place
it was found: the ops of ``torch.ops.aten``/``prims`` (but for the ones that open files), a few sym-int
operators, names that are identifiers, expressions of sympy's arithmetic, no guard code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

# Where a node may call: torch's ops of these namespaces (torch.ops.aten.conv2d.default), and the operators
# torch.export records for symbolic sizes (operator.mul on a batch size).
OP_TARGET = re.compile(r"torch\.ops\.(aten|prims)\.(\w+)(\.\w+)?")
SYM_TARGETS = frozenset(
    [f"_operator.{name}" for name in ("getitem", "add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "neg",
                                      "pos", "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "lshift", "rshift")]
    + ["math.trunc"] + [f"torch.sym_{name}" for name in ("not", "int", "float", "ite", "max", "min", "sqrt")])
# aten ops that reach the file system: from_file creates the file it names; save writes one.
FILE_OPS = frozenset({"from_file", "save"})
# Strings that are only metadata (never parsed as code): any printable text.
TEXT_KEYS = frozenset({"stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "custom", "torch_version",
                       "in_spec", "out_spec", "as_string"})
# The pytree node types an exported model's inputs and outputs are made of.
SPEC_TYPES = frozenset({None, "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict"})
NAME = re.compile(r"[A-Za-z0-9_.]*")  # names, dotted module paths (decoder.0.linear), dtypes, devices
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")  # a new source line in a comment, and worse
# What a shape expression calls: sympy's arithmetic and torch's integer functions (torch.utils._sympy.functions).
EXPR_FUNCTIONS = frozenset({
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Max", "Min", "Abs", "Eq", "Ne", "Lt", "Le", "Gt",
    "Ge", "And", "Or", "Not", "floor", "ceiling", "sqrt", "FloorDiv", "CeilDiv", "ModularIndexing", "Where",
    "PythonMod", "Mod", "CleanDiv", "CeilToInt", "FloorToInt", "IntTrueDiv", "FloatTrueDiv", "ToFloat",
    "TruncToInt", "TruncToFloat", "RoundToInt", "RoundDecimal", "PowByNatural", "FloatPow", "Identity",
    "LShift", "RShift", "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or", "OpaqueUnaryFn_sqrt"})
EXPR_KEYWORDS = frozenset({"positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite"})
_EXPR_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Call, ast.Name, ast.Constant,
               ast.keyword, ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


class ProgramRefused(ValueError):
    """Why the program JSON is refused, in words that follow "its program (models/model.json) ..."."""


def check_program(program: Any) -> None:
    """Raise ProgramRefused unless ``program`` (the parsed ``models/model.json``) holds only what
    ``torch.export.save`` writes for a modelforge model: see the module's docstring."""
    if not isinstance(program, dict):
        raise ProgramRefused("is not a JSON object")
    if program.get("guards_code"):
        raise ProgramRefused("carries guard code (guards_code), Python source that torch.export.load would run; "
                             "modelforge's exports carry none")
    for key in program.get("range_constraints") or {}:
        check_expression(key, "range_constraints")
    for path, key, value in _strings(program, ()):
        where = "/".join(path) or "the top level"
        if CONTROL.search(value):
            raise ProgramRefused(f"holds a control character in {where}: {value[:60]!r}")
        if key in TEXT_KEYS:
            if key == "as_string" and re.search(r"['\"\\\n]", value):
                raise ProgramRefused(f"holds a string argument with quotes in {where}: {value[:60]!r}")
            if key in ("in_spec", "out_spec"):
                _check_spec(value, where)
        elif key == "target":
            check_target(value)
        elif key == "expr_str":
            check_expression(value, where)
        elif path[-1:] != ("range_constraints",) and not NAME.fullmatch(value):
            raise ProgramRefused(f"holds {value[:60]!r} in {where}, where a name belongs")


def _strings(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """(path, key, string) for every string and every mapping key of ``value``; a key is yielded under "<key>"."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in TEXT_KEYS:  # a key of metadata (custom) is metadata too
                yield path, "<key>", str(key)
            yield from (_strings(item, (*path, str(key))) if key not in TEXT_KEYS or not isinstance(item, str)
                        else [((*path, str(key)), str(key), item)])
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, path)
    elif isinstance(value, str):
        yield path, path[-1] if path else "", value


def check_target(target: str) -> None:
    """A node's callee: an op of ``torch.ops.aten``/``prims`` that does not reach files, or a sym-int operator."""
    found = OP_TARGET.fullmatch(target)
    if found and found.group(2) not in FILE_OPS or target in SYM_TARGETS:
        return
    why = "an op that reaches the file system" if found else "not an op of torch.ops.aten or prims"
    raise ProgramRefused(f"calls {target[:80]!r} ({why}); modelforge's exports call only those")


def check_expression(text: str, where: str) -> None:
    """A shape expression (``Mul(Integer(4), Symbol('s77', positive=True, integer=True))``, ``s77``): sympy's
    arithmetic on symbols and numbers only, as torch writes them. ``sympy.sympify`` evaluates it as Python."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ProgramRefused(f"holds a shape expression that does not parse in {where}: {text[:60]!r}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _EXPR_NODES) or _bad_expression_node(node):
            raise ProgramRefused(f"holds a shape expression that is not sympy arithmetic in {where}: "
                                 f"{text[:60]!r}")


def _bad_expression_node(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return not isinstance(node.func, ast.Name) or node.func.id not in EXPR_FUNCTIONS or any(
            k.arg not in EXPR_KEYWORDS or not isinstance(k.value, ast.Constant) or not isinstance(k.value.value, bool)
            for k in node.keywords)
    if isinstance(node, ast.Name):
        return node.id.startswith("_")
    if isinstance(node, ast.Constant):  # a symbol's name (Symbol('s77')), a number, a truth value
        value = node.value
        return isinstance(value, str) and not re.fullmatch(r"[A-Za-z]\w*", value) or \
            not isinstance(value, (str, int, float, bool))
    return False


def _check_spec(text: str, where: str) -> None:
    """An input or output spec (pytree JSON): only tuples, lists, dicts and leaves."""
    import json

    try:
        spec = json.loads(text)
    except (ValueError, RecursionError):
        raise ProgramRefused(f"holds an input/output spec that is not JSON in {where}") from None
    stack = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if "type" in node and node["type"] not in SPEC_TYPES:
                raise ProgramRefused(f"takes or gives a {str(node['type'])[:60]!r} in {where}; modelforge's "
                                     "exports take and give tensors")
            stack.extend(node.get("children_spec") or [])
