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
