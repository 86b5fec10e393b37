"""Math in expressions (``**``, sqrt, exp, log, abs, floor/ceil/round with a divisor) and as ops (issue 49)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from modelforge import ConfigError, build_model
from modelforge.layers import Clamp, Exp, Log, Normalize, Sqrt
from modelforge.layers.expressions import evaluate, resolve_args


@pytest.mark.parametrize(("text", "value"), [
    ("(2 * window - 1) ** 2", 169),
    ("dim ** -0.5", 64 ** -0.5),
    ("2 ** 10", 1024),
    ("sqrt(dim)", 8.0),
    ("exp(0)", 1.0),
    ("log(exp(3))", 3.0),
    ("abs(1 - window)", 6),
    ("floor(27.9)", 27),
    ("ceil(dim / 3)", 22),
    ("round(2.5)", 2),  # Python's and torch's rule: halves to even
    ("round(27.3, 8)", 24),
    ("round(28, 8)", 32),  # 3.5 eights: to the even multiple
    ("floor(dim + 7, 8)", 64),
    ("ceil(dim + 1, 8)", 72),
    ("floor(0.3, 0.25)", 0.25),
])
def test_math_in_expressions(text: str, value: float) -> None:
    got = evaluate(text, {"window": 7, "dim": 64}, "p")
    assert got == pytest.approx(value) and type(got) is type(value)


def regnet_widths(depth: int, w_0: int, w_a: float, w_m: float, quant: int = 8) -> list[int]:
    """torchvision's RegNet width rule (BlockParams.from_init_params), in plain torch, per block."""
    widths_cont = torch.arange(depth) * w_a + w_0
    block_capacity = torch.round(torch.log(widths_cont / w_0) / math.log(w_m))
    return (torch.round(torch.divide(w_0 * torch.pow(w_m, block_capacity), quant)) * quant).int().tolist()


REGNET_RULE = "round(w_0 * w_m ** round(log((index * w_a + w_0) / w_0) / log(w_m)), 8)"


@pytest.mark.parametrize(("depth", "w_0", "w_a", "w_m"), [
    (16, 24, 36.44, 2.49),   # regnet_y_400mf
    (15, 48, 27.89, 2.09),   # regnet_y_800mf
    (13, 24, 36.0, 2.5),     # regnet_x_400mf... family shapes
    (27, 232, 115.89, 2.53),  # regnet_y_16gf
])
def test_regnet_width_rule_as_an_expression_equals_torchvisions(depth: int, w_0: int, w_a: float, w_m: float) -> None:
    names = {"w_0": w_0, "w_a": w_a, "w_m": w_m}
    ours = [evaluate(REGNET_RULE, {**names, "index": i}, "p") for i in range(depth)]
    assert ours == regnet_widths(depth, w_0, w_a, w_m)
    assert all(type(w) is int for w in ours)


def test_the_rule_in_a_model_file_gives_each_copy_its_width() -> None:
    model = build_model({"name": "graph", "params": {"w_0": 8, "w_a": 6.0, "w_m": 2.0},
                         "nodes": {"body": {"block": "conv", "args": {"out_channels": REGNET_RULE}, "repeat": 4},
                                   "gate": {"block": "exp"}}})
    widths = [conv.out_channels for conv in model.nodes.body.modules() if isinstance(conv, torch.nn.Conv2d)]
    assert widths == regnet_widths(4, 8, 6.0, 2.0) == [8, 16, 16, 32]


def test_math_in_a_formula_is_torchs_on_the_index_tensors() -> None:
    made = resolve_args("lambda i: sqrt(i) + log(i + 1) + floor(i / 2) + round(i, 4) + abs(i - 2)", {}, "p")
    i = torch.arange(5)
    expected = torch.sqrt(i.float()) + torch.log((i + 1).float()) + torch.floor(i / 2) + torch.round(i / 4) * 4 \
        + (i - 2).abs()
    torch.testing.assert_close(made.over([5]), expected, rtol=0, atol=0)


@pytest.mark.parametrize(("text", "message"), [
    ("10 ** 10 ** 10", r"p: expression '10 \*\* 10 \*\* 10': 10 \*\* 10000000000 is too large"),
    ("log(0)", r"log\(0\) is not a real number"),
    ("sqrt(-1)", r"sqrt\(-1\) is not a real number"),
    ("exp(1000)", r"exp\(1000\) is too large"),
    ("round(3, 0)", r"round's divisor is '0' = 0"),
    ("sqrt(1, 2)", r"sqrt takes one number, got 2 arguments"),
    ("floor(1, 2, 3)", r"floor takes one number, or a number and a divisor, got 3 arguments"),
    ("(-8) ** 0.5", r"\(-8\) \*\* 0.5 is not a real number"),
    ("0 ** -1", r"division by zero"),
    ("sqrt(flag)", r"'flag' is True, not a number"),
    ("pow(2, 3)", r"'pow\(2, 3\)' is not allowed"),
])
def test_bad_math_is_an_error_naming_the_expression(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        evaluate(text, {"flag": True}, "p")


def test_the_ops_are_torchs_functions() -> None:
    x = torch.randn(2, 3, 5)
    assert torch.equal(Exp()(x), x.exp()) and torch.equal(Sqrt()(x.abs()), x.abs().sqrt())
    assert torch.equal(Log()(x.abs()), x.abs().log())
    assert torch.equal(Clamp(max=math.log(100.0))(x * 9), torch.clamp(x * 9, max=math.log(100.0)))
    assert torch.equal(Clamp(min=-1, max=1)(x), x.clamp(-1, 1))
    assert torch.equal(Normalize()(x), F.normalize(x, dim=-1))
    assert torch.equal(Normalize(dim=1, p=1.0)(x), F.normalize(x, p=1.0, dim=1))


@pytest.mark.parametrize(("block", "args", "message"), [
    ("clamp", {}, r"model.nodes.c.args.max: node 'c' \(clamp\): clamp without min or max does nothing"),
    ("clamp", {"min": 2, "max": 1}, r"max 1 is below min 2"),
    ("clamp", {"max": "high"}, r"model.nodes.c.args.max: .*expected float or null, got str 'high'"),
    ("normalize", {"dim": 0}, r"model.nodes.c.*dim"),
    ("exp", {"base": 2}, r"(?s)model.nodes.c.args.base.*"),
])
def test_bad_op_arguments_name_the_node(block: str, args: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model({"name": "graph", "nodes": {"c": {"block": block, "args": args}}})


def test_an_expression_with_a_power_and_the_ops_build_in_a_model_file(tmp_path) -> None:
    """The acceptance of issue 49: `(2 * window - 1) ** 2` and an op `exp` in a model file."""
    from modelforge import create_model

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mathy.yaml").write_text(
        "name: graph\n"
        "params: {window: 7}\n"
        "nodes:\n"
        "  flat:  {block: flatten}\n"
        "  fc:    {block: nn.Linear, args: {out_features: '(2 * window - 1) ** 2'}}\n"
        "  pos:   {block: exp}\n"
        "  root:  {block: sqrt}\n"
        "  logs:  {block: log}\n"
        "  lim:   {block: clamp, args: {max: 4.6}}\n"
        "  unit:  {block: normalize, args: {dim: -1}}\n")
    model = create_model("mathy", config_dir=str(tmp_path))
    x = torch.randn(2, 1, 28, 28)
    out = model(x)
    expected = F.normalize(model.nodes.fc(x.flatten(1)).exp().sqrt().log().clamp(max=4.6), dim=-1)
    assert out.shape == (2, 169) and not out.isnan().any() and torch.equal(out, expected)
