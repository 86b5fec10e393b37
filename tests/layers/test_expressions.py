"""Expressions over block parameters: min and max of a list parameter (the image's sides)."""

from __future__ import annotations

import pytest

from modelforge import ConfigError
from modelforge.layers.expressions import evaluate


def test_min_and_max_take_numbers_or_a_list_parameter() -> None:
    names = {"input_size": [28, 32], "c": 12}
    assert evaluate("min(input_size)", names, "p") == 28
    assert evaluate("max(input_size, c * 3)", names, "p") == 36
    assert evaluate("4 if min(input_size) >= 32 else 2", names, "p") == 2
    assert evaluate("max(c, 8)", names, "p") == 12


@pytest.mark.parametrize(("text", "message"), [
    ("min(word)", r"p: expression 'min\(word\)': min takes numbers or a list of numbers, got \['relu'\]"),
    ("max(input_size, flag)", r"max takes numbers or a list of numbers, got \[28, 32, True\]"),
])
def test_min_and_max_of_anything_else_is_an_error_naming_the_expression(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        evaluate(text, {"input_size": [28, 32], "word": "relu", "flag": True}, "p")


def test_an_entry_of_a_list_parameter() -> None:
    names = {"input_size": [28, 32], "input_shape": [13, 17, 96], "w": 7}
    assert evaluate("input_size[0] * input_size[1]", names, "p") == 28 * 32
    assert evaluate("(input_shape[0] + w - 1) // w * w", names, "p") == 14
    assert evaluate("input_shape[-1] // 3", names, "p") == 32
    assert evaluate("input_size[w - 6]", names, "p") == 32


@pytest.mark.parametrize(("text", "message"), [
    ("input_size[2]", r"p: expression 'input_size\[2\]': input_size has 2 entries \[28, 32\]; there is no entry 2"),
    ("input_size[0:1]", r"a slice: only one entry of a list parameter can be read"),
    ("w[0]", r"'w' is 7: only one entry of a list parameter can be read"),
    ("input_size[w // 2]", r"there is no entry 3"),
    ("input_size[true]", r"the index 'true' is True, not a whole number"),
])
def test_a_bad_entry_is_an_error_naming_the_expression(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        evaluate(text, {"input_size": [28, 32], "w": 7}, "p")


def test_a_formula_is_evaluated_per_element_with_python_arithmetic() -> None:
    from modelforge.layers.expressions import ElementFormula, resolve_args

    made = resolve_args("lambda i, j: 3 * (i >= h - 1) + (j % 2 == 1) * (1 + (j > 2))", {"h": 2}, "p")
    assert isinstance(made, ElementFormula)
    assert str(made) == "lambda i, j: 3 * (i >= h - 1) + (j % 2 == 1) * (1 + (j > 2))"
    assert made.over([2, 5]).tolist() == [[0, 1, 0, 2, 0], [3, 4, 3, 5, 3]]  # a comparison counts 1 or 0, as in Python
    assert resolve_args("lambda i: min(i, 2) if i % 2 == 0 and not i == 4 else -1", {}, "p").over([5]).tolist() == \
        [0, -1, 2, -1, -1]
    assert resolve_args("lambda i: 0 < i < 3", {}, "p").over([4]).tolist() == [False, True, True, False]
    assert resolve_args("lambda i: 7", {}, "p").over([2]).tolist() == [7, 7]


@pytest.mark.parametrize(("text", "message"), [
    ("lambda i, j: i - k", r"(?s)p: expression 'lambda i, j: i - k': unknown name 'k'.*allowed: i, j, h"),
    ("lambda i, j: i - hh", r"did you mean 'h'"),
    ("lambda *a: 1", r"a formula names its indices and nothing else"),
    ("lambda i: lambda j: j", r"a formula cannot hold another formula"),
    ("lambda i: i // (i - i)", r"division by zero"),
    ("lambda i: i.shape", r"'i.shape' is not allowed"),
])
def test_a_bad_formula_is_an_error_naming_it(text: str, message: str) -> None:
    from modelforge.layers.expressions import resolve_args

    with pytest.raises(ConfigError, match=message):
        made = resolve_args(text, {"h": 2}, "p")
        made.over([3])
