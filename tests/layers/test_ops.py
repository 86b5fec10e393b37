"""The element-wise, matrix, shape and learned-tensor ops, as plain modules."""

from __future__ import annotations

import math

import pytest
import torch

from modelforge import ConfigError
from modelforge.layers import Div, LearnedTensor, MatMul, Mean, Mul, Permute, Reshape, Softmax, Sub
from modelforge.layers.arithmetic import broadcast_problem


def test_elementwise_ops_broadcast_as_torch() -> None:
    x, gate, scale = torch.randn(2, 3, 4, 4), torch.rand(2, 3, 1, 1), torch.rand(3, 1, 1)
    torch.testing.assert_close(Mul()(x, gate), x * gate)
    torch.testing.assert_close(Mul()(scale, x, gate), scale * x * gate)
    torch.testing.assert_close(Sub()(x, gate), x - gate)
    torch.testing.assert_close(Div()(x, gate + 1), x / (gate + 1))


def test_a_broadcast_to_a_shape_none_of_the_inputs_has_is_refused() -> None:
    assert broadcast_problem([[2, 3, 4, 4], [2, 3, 1, 1]]) is None
    assert broadcast_problem([[3, 1, 1], [2, 3, 4, 4]]) is None
    assert broadcast_problem([[2, 3], [2, 3, 1, 1]]) == "broadcast to [2, 3, 2, 3], the shape of none of them"
    assert broadcast_problem([[2, 3, 4], [2, 5, 4]]) == "do not broadcast"
    assert Sub().check_shapes([[2, 3], [2, 3], [2, 3]]) == "takes 2 inputs, got 3:"
    assert Mul().check_shapes([[2, 3]]) == "takes two inputs or more (or one and a scalar), got 1:"


def test_matmul_transposes_scales_and_checks_the_shared_dimension() -> None:
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 6, 8)
    torch.testing.assert_close(MatMul(transpose_b=True, scaled=True)(q, k), q @ k.transpose(-2, -1) / math.sqrt(8))
    assert MatMul().check_shapes([[2, 5, 8], [2, 8, 3]]) is None
    assert MatMul().check_shapes([[2, 5, 8], [2, 5, 8]]) == (
        "cannot multiply: the first input's last dimension (8) must equal the second's second-to-last (5); got")
    assert MatMul(transpose_b=True).check_shapes([[2, 5, 8], [2, 5, 8]]) is None
    assert MatMul().check_shapes([[3, 5, 8], [2, 8, 3]]) == (
        "cannot multiply: the batch dimensions do not broadcast; got")
    out = MatMul()(torch.zeros(2, 5, 8), torch.zeros(8, 3))
    assert MatMul().own_macs((torch.zeros(2, 5, 8),), out) == 2 * 5 * 3 * 8


def test_shape_ops() -> None:
    x = torch.randn(2, 6, 4, 5)
    assert Reshape([-1, 3, 20])(x).shape == (2, 2, 3, 20)
    torch.testing.assert_close(Permute([0, 2, 3, 1])(x), x.permute(0, 2, 3, 1))
    torch.testing.assert_close(Mean([2, 3], keepdim=True)(x), x.mean((2, 3), keepdim=True))
    assert Mean(1)(x).shape == (2, 4, 5)
    torch.testing.assert_close(Softmax()(x), x.softmax(-1))
    assert Permute([0, 2, 1]).check_shapes([[2, 6, 4, 5]]) == "orders 3 dimensions ([0, 2, 1]), but its input has 4:"


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Reshape([-1, -1]), r"shape: cannot reshape to \[-1, -1\]"),
    (lambda: Reshape([4, 0, 4]), r"shape: cannot reshape to \[4, 0, 4\]"),
    (lambda: Permute([0, 2, 2]), r"dims: \[0, 2, 2\] is not an order of dimensions"),
    (lambda: Mean([1.5]), r"dim\[0\]: expected int, got float 1.5"),
    (lambda: LearnedTensor([3, 0]), r"shape: cannot make a tensor of shape \[3, 0\]"),
    (lambda: LearnedTensor([3], init="zeroes"), r"(?s)init: unknown initializer 'zeroes'.*did you mean 'zeros'"),
])
def test_bad_arguments_are_config_errors(make, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_a_learned_tensor_is_a_parameter_filled_by_its_init() -> None:
    gamma = LearnedTensor([4, 1, 1], init={"name": "constant", "val": 1e-6})
    assert [n for n, _ in gamma.named_parameters()] == ["weight"]
    assert gamma().shape == (4, 1, 1) and torch.all(gamma() == 1e-6) and gamma().requires_grad
    assert torch.all(LearnedTensor([3]).weight == 0)  # zeros unless told
    torch.manual_seed(0)
    assert LearnedTensor([100], init={"name": "trunc_normal", "std": 0.02, "a": -0.04, "b": 0.04})().abs().max() <= 0.04


def test_learned_tensors_fill_again_after_a_build_on_the_meta_device() -> None:
    """torch's convention for modules built on meta: ``to_empty`` then ``reset_parameters`` fills them by their init."""
    from modelforge.layers import ClassToken, PositionEmbedding

    with torch.device("meta"):
        gamma, token, position = LearnedTensor([4, 1, 1], init="ones"), ClassToken(8), PositionEmbedding(5, 8, std=0.5)
    for module in (gamma, token, position):
        module.to_empty(device="cpu").reset_parameters()
    assert torch.all(gamma() == 1) and torch.all(token.token == 0)
    assert 0.2 < position.embedding.std().item() < 0.8
