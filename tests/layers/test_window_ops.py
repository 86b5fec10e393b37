"""The ops windowed attention is written from (issue 39): each computes what torch computes, refuses bad
arguments in one line, and runs on meta and fake tensors (shapes without arithmetic, as a graph may be built)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode

from modelforge import ConfigError
from modelforge.layers import (
    Add,
    Compare,
    Constant,
    MaskedFill,
    MatMul,
    Mul,
    Neg,
    PadToMultiple,
    Reshape,
    Roll,
    Slice,
    Sub,
    Sum,
    Take,
    Unbind,
)
from modelforge.layers.expressions import resolve_args


def formula(text: str, **names: object) -> object:
    return resolve_args(text, names, "value")


def test_roll_pad_and_slice_compute_what_torch_computes() -> None:
    x = torch.randn(2, 5, 6, 3)
    torch.testing.assert_close(Roll([-1, 2], [1, 2])(x), x.roll((-1, 2), (1, 2)))
    torch.testing.assert_close(Roll(3, [1, 2])(x), x.roll((3, 3), (1, 2)))  # one shift for every dim
    torch.testing.assert_close(PadToMultiple(4, [1, 2])(x), F.pad(x, (0, 0, 0, 2, 0, 3)))
    assert PadToMultiple([5, 3], [1, 2])(x).shape == (2, 5, 6, 3)  # already whole: no padding
    assert PadToMultiple(4, -1, value=1.0)(x)[..., 3].eq(1.0).all()
    torch.testing.assert_close(Slice([1, 2], end=[4, 5])(x), x[:, :4, :5])
    torch.testing.assert_close(Slice([1, 2], start=[1, 0], step=2)(x), x[:, 1::2, 0::2])
    assert Slice(-1, start=-2)(x).shape == (2, 5, 6, 2)


def test_reshape_keeps_the_sizes_its_zeros_name_at_any_input_size() -> None:
    """A channel shuffle with [groups, -1, 0, 0] is right at 224x192 too (issue 39: it was not)."""
    shuffle = nn.Sequential(Reshape([2, -1, 0, 0]), nn.Flatten(1, 2))
    for h, w in [(4, 4), (4, 6), (5, 3)]:
        x = torch.randn(2, 8, h, w)
        expected = x.view(2, 2, 4, h, w).transpose(1, 2).reshape(2, 8, h, w)
        grouped = Reshape([2, -1, 0, 0])(x).transpose(1, 2)
        torch.testing.assert_close(Reshape([-1, 0, 0])(grouped.contiguous()), expected)
    assert Reshape([0, 0, 3, 2, -1])(torch.zeros(2, 5, 7, 24)).shape == (2, 5, 7, 3, 2, 4)
    assert Reshape([0, 0])(torch.zeros(2, 5, 7)).shape == (2, 5, 7)
    assert Reshape([0, 0, 0, 2]).check_shapes([[2, 3, 4]]) == (
        "keeps 3 sizes of its input (the 0s of [0, 0, 0, 2]), but its input has 2:")
    del shuffle


def test_reshape_refuses_sizes_that_do_not_hold_a_sample() -> None:
    """The empty batch a graph is built on reshapes to anything: the sizes are checked against a sample's values
    (maxvit_t at 64x64: 7x7 windows of a 16x16 map, [C, 2, 7, 2, 7], were built and failed at the first batch)."""
    assert Reshape([0, 2, 7, 2, 7]).check_shapes([[2, 64, 16, 16]]) == (
        "cannot reshape 16384 values per sample to [64, 2, 7, 2, 7]:")
    assert Reshape([-1, 5]).check_shapes([[2, 3, 4]]) == "cannot reshape 12 values per sample to [-1, 5]:"
    assert Reshape([0, 2, 8, 2, 8]).check_shapes([[2, 64, 16, 16]]) is None
    assert Reshape([2, -1, 0, 0]).check_shapes([[2, 8, 5, 3]]) is None


def test_unbind_sum_neg_and_scalar_arithmetic() -> None:
    x = torch.randn(2, 3, 4)
    q, k, v = Unbind(1)(x)
    torch.testing.assert_close(k, x[:, 1])
    torch.testing.assert_close(Sum([1, 2], keepdim=True)(x), x.sum((1, 2), keepdim=True))
    torch.testing.assert_close(Neg()(x), -x)
    torch.testing.assert_close(Mul(scalar=-100.0)(x), x * -100.0)
    torch.testing.assert_close(Sub(scalar=1)(x), x - 1)
    torch.testing.assert_close(Add(scalar=0.5)(x), x + 0.5)
    assert Sub().check_shapes([[2, 3]]) == "takes 2 inputs, got 1:"
    assert Mul(scalar=2.0).check_shapes([[2, 3], [2, 3]]) == "takes one input with a scalar, got 2:"


def test_outer_and_broadcast_arithmetic_are_asked_for() -> None:
    rows, cols = torch.arange(4.0).view(4, 1), torch.arange(3.0).view(1, 3)
    torch.testing.assert_close(Sub(outer=True)(rows, cols), rows - cols)
    assert Sub().check_shapes([[4, 1], [1, 3]]).startswith("cannot subtract inputs that broadcast to [4, 3], the shape")
    assert Sub(outer=True).check_shapes([[4, 1], [1, 3]]) is None
    assert Add().check_shapes([[2, 4, 3, 3], [4, 3, 3]]) == (
        "cannot add inputs of different shapes (broadcast: true adds them as torch broadcasts)")
    assert Add(broadcast=True).check_shapes([[2, 4, 3, 3], [4, 3, 3]]) is None
    assert Add(broadcast=True).check_shapes([[2, 4], [3, 1, 4]]).startswith("cannot add inputs that broadcast to [3, 2")


def test_compare_and_masked_fill_make_a_mask() -> None:
    diff = torch.tensor([[0.0, 2.0], [-1.0, 0.0]])
    apart = Compare("ne", scalar=0)(diff)
    assert apart.dtype == torch.bool and apart.tolist() == [[False, True], [True, False]]
    torch.testing.assert_close(MaskedFill(-100.0)(diff, apart), torch.tensor([[0.0, -100.0], [-100.0, 0.0]]))
    assert Compare("lt")(diff, torch.zeros(2, 2)).tolist() == [[False, False], [True, False]]
    assert MaskedFill(1.0).check_shapes([[2, 2], [3, 2, 2]]) == (
        "takes a mask that broadcasts to the first input's shape; got")


def test_a_constant_is_a_number_or_a_formula_of_its_indices_and_is_not_saved() -> None:
    ones = Constant([2, 3], 1.0)
    assert ones().dtype == torch.float32 and ones().eq(1.0).all() and ones.state_dict() == {}
    index = Constant([4, 4], formula("lambda i, j: (i // w - j // w + w - 1) * (2 * w - 1) + i % w - j % w + w - 1",
                                     w=2))
    coords = torch.stack(torch.meshgrid(torch.arange(2), torch.arange(2), indexing="ij")).flatten(1)
    relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + 1  # torchvision's, for a 2x2 window
    assert torch.equal(index(), relative[..., 0] * 3 + relative[..., 1]) and index().dtype == torch.int64
    mask = Constant([3], formula("lambda i: -100.0 if i > 0 else 0.0"), dtype="float64")
    assert mask().tolist() == [0.0, -100.0, -100.0] and mask().dtype == torch.float64
    assert Constant([2, 2], formula("lambda i, j: i == j"))().tolist() == [[True, False], [False, True]]
    table = torch.randn(9, 4)
    torch.testing.assert_close(Take(0)(table, index()), table[index()])
    torch.testing.assert_close(Take(-1)(table, torch.tensor([3, 0])), table[:, [3, 0]])


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Constant([2, 0]), r"shape: cannot make a tensor of shape \[2, 0\]"),
    (lambda: Constant([2**14, 2**14]), r"shape: \[16384, 16384\] is 268,435,456 elements, more than a constant"),
    (lambda: Constant([2], "zeros"), r"value: expected a number or a formula 'lambda i, j: ...', got str 'zeros'"),
    (lambda: Constant([2], 1, dtype="float"), r"(?s)dtype: unknown dtype 'float'.*allowed: float32"),
    (lambda: Constant([2, 2], formula("lambda i: i"))(), r"value: formula 'lambda i: ...' takes 1 indices, but the "
                                                         r"tensor has 2 dimensions \[2, 2\]"),
    (lambda: Roll([1, 2, 3], [1, 2]), r"shifts: \[1, 2, 3\] gives 3 values for 2 dims \[1, 2\]"),
    (lambda: PadToMultiple(0, 1), r"multiple: must be a size >= 1, got 0"),
    (lambda: Slice(1, step=0), r"step: must be a size >= 1"),
    (lambda: Compare("neq"), r"(?s)op: unknown comparison 'neq'.*did you mean 'ne'"),
    (lambda: MatMul(scale_first=True), r"scale_first: scale_first says where to scale, but scaled is false"),
    (lambda: Mul(scalar="2"), r"scalar: expected float or null, got str '2'"),
])
def test_bad_arguments_are_config_errors(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_matmul_scales_q_first_as_torchvision_does() -> None:
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    assert torch.equal(MatMul(transpose_b=True, scaled=True, scale_first=True)(q, k),
                       (q * 8 ** -0.5).matmul(k.transpose(-2, -1)))  # torchvision's Swin, bit for bit


# every new op on one input of shape [2, 6, 4, 3] (or with the extra inputs it takes): the same output shape
# from real, meta and fake tensors
OPS: list[tuple[str, Callable[[], nn.Module], Callable[[Tensor], tuple[Tensor, ...]]]] = [
    ("roll", lambda: Roll([1, -1], [1, 2]), lambda x: (x,)),
    ("pad_to_multiple", lambda: PadToMultiple(4, [1, 2]), lambda x: (x,)),
    ("slice", lambda: Slice([1, 2], start=[1, 0], end=[5, 3], step=2), lambda x: (x,)),
    ("reshape", lambda: Reshape([2, -1, 0]), lambda x: (x,)),
    ("unbind", lambda: Unbind(3), lambda x: (x,)),
    ("sum", lambda: Sum([1, 2]), lambda x: (x,)),
    ("neg", Neg, lambda x: (x,)),
    ("add", lambda: Add(broadcast=True), lambda x: (x, x[0, 0])),
    ("sub", lambda: Sub(outer=True), lambda x: (x[:, :, :1], x[:, :1, :])),
    ("compare", lambda: Compare("ge", scalar=0.0), lambda x: (x,)),
    ("masked_fill", lambda: MaskedFill(-100.0), lambda x: (x, x > 0)),
    ("matmul", lambda: MatMul(transpose_b=True, scaled=True, scale_first=True), lambda x: (x, x)),
    ("take", lambda: Take(1), lambda x: (x, torch.tensor([[0, 5], [1, 1]]))),
    ("constant", lambda: Constant([3, 4], formula("lambda i, j: i * 4 + j")), lambda x: ()),
]


@pytest.mark.parametrize(("name", "make", "inputs"), OPS, ids=[name for name, _, _ in OPS])
def test_every_new_op_runs_on_meta_and_fake_tensors(name: str, make: Callable[[], nn.Module],
                                                    inputs: Callable[[Tensor], tuple[Tensor, ...]]) -> None:
    def shapes(out: object) -> list[tuple[int, ...]]:
        return [tuple(t.shape) for t in (out if isinstance(out, tuple) else (out,))]

    x = torch.randn(2, 6, 4, 3)
    expected = shapes(make()(*inputs(x)))
    with torch.device("meta"):
        on_meta = make()  # built on the meta device, then filled as torch fills such modules
    assert shapes(on_meta(*inputs(x.to("meta")))) == expected
    filled = on_meta.to_empty(device="cpu")
    if hasattr(filled, "reset_parameters"):
        filled.reset_parameters()
        assert torch.equal(filled(), make()())  # a constant computes its tensor again
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        out = make()(*inputs(mode.from_tensor(x)))
        assert shapes(out) == expected
