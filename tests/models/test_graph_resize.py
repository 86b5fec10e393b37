"""A composite built for its input's size (it reads input_shape) runs at any size with the same weights, or
refuses a size its weights cannot serve in one line naming the node and the size it was built for (issue 49)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from modelforge import ConfigError, build_model

# a composite whose reshape and constant follow its input's size: [B, H, W] -> rows of H
ROWS = {"params": {"h": "input_shape[0]"},
        "nodes": {"lin": {"block": "nn.Linear", "args": {"out_features": "in_features"}},
                  "ramp": {"block": "constant", "inputs": [],
                           "args": {"shape": ["h", 1], "value": "lambda i, j: i / 2"}},
                  "plus": {"block": "add", "args": {"broadcast": True}, "inputs": ["lin", "ramp"]},
                  "flat": {"block": "reshape", "args": {"shape": ["h * input_shape[1]"]}}}}


def rows_model(**extra: Any) -> torch.nn.Module:
    return build_model({"name": "graph", "in_channels": 6, "input_size": [1, 5], "blocks": {"rows": ROWS},
                        "nodes": {"sq": {"block": "reshape", "args": {"shape": [6, 5]}},
                                  "r": {"block": "rows", **extra}}}, seed=0)


def expected_rows(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    lin = model.nodes.r.lin
    return (lin(x) + torch.arange(x.shape[1]).view(-1, 1) / 2).reshape(x.shape[0], -1)


def test_a_composite_that_reads_its_input_shape_runs_at_another_size_with_the_same_weights() -> None:
    model = rows_model()
    graph = model.nodes.r
    keys = list(model.state_dict())
    for h in (6, 9, 2):
        x = torch.randn(3, h, 5)
        torch.testing.assert_close(graph(x), expected_rows(model, x))
    assert list(model.state_dict()) == keys  # nothing of the rebuilt graphs is saved
    rebuilt = graph.sized.variants[((9, 5),)]
    assert rebuilt.lin is graph.lin and rebuilt.ramp is not graph.ramp  # weights shared, the constant made anew
    assert rebuilt.ramp.tensor.shape == (9, 1)


def test_training_at_another_size_reaches_the_built_weights() -> None:
    model = rows_model().train()
    graph = model.nodes.r
    graph(torch.randn(2, 8, 5)).sum().backward()
    assert graph.lin.weight.grad is not None and graph.lin.weight.grad.abs().sum() > 0
    assert graph.sized.variants[((8, 5),)].training


def test_a_cast_makes_the_rebuilt_graphs_again() -> None:
    model = rows_model()
    graph = model.nodes.r
    graph(torch.randn(1, 4, 5))
    model.double()
    assert graph.sized.variants == {}
    x = torch.randn(2, 4, 5, dtype=torch.float64)
    out = graph(x)
    assert out.dtype == torch.float64 and graph.sized.variants[((4, 5),)].ramp.tensor.dtype == torch.float64
    torch.testing.assert_close(out, expected_rows(model, x))


def test_weights_whose_shape_follows_the_size_refuse_another_size_in_one_line() -> None:
    sized = {"nodes": {"scale": {"block": "parameter", "inputs": [], "args": {"shape": ["input_shape[0]", 1]}},
                       "out": {"block": "mul", "inputs": ["input", "scale"]}}}
    model = build_model({"name": "graph", "in_channels": 6, "input_size": [1, 5], "blocks": {"sized": sized},
                         "nodes": {"sq": {"block": "reshape", "args": {"shape": [6, 5]}}, "s": {"block": "sized"}}})
    assert model(torch.randn(2, 1, 6, 5)).shape == (2, 6, 5)
    with pytest.raises(ConfigError) as caught:
        model.nodes.s(torch.randn(2, 7, 5))
    assert str(caught.value).splitlines()[0] == (
        "model.nodes.s: built for input [6, 5] (without the batch), it cannot run at [7, 5]: node 'scale' has weights "
        "of another shape at this size")


# --------------------------------------------------------------------------------------------
# the zoo's swin_t, built at one size and run at others, against torchvision at those sizes

def check_sizes(side: int, dim: int, sizes: list[tuple[int, int]], record: Callable[[str, Any], None]) -> None:
    from tests.helpers.swin import swin_t_pair  # skips without torchvision

    reference, ours = swin_t_pair(side, dim)
    reference.eval(), ours.eval()
    for size in sizes:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            expected, got = reference(x), ours(x)
        diff = (got - expected).abs().max().item()
        record("summary", f"swin_t (embed_dim {dim}) built at {side}x{side}, run at {size[0]}x{size[1]}: "
                          f"max |ours - torchvision| {diff:.2e}")
        assert diff <= 1e-5 * max(1.0, expected.abs().max().item())


def test_swin_t_narrow_runs_at_other_sizes_as_torchvisions(record_property: Callable[[str, Any], None]) -> None:
    """At 72x56 (the last stages padded and one window) and 96x96, from a model built at 72x72."""
    check_sizes(72, 24, [(72, 56), (96, 96)], record_property)


@pytest.mark.slow
def test_swin_t_built_at_224_runs_at_224x160_and_256x256_as_torchvisions(
        record_property: Callable[[str, Any], None]) -> None:
    check_sizes(224, 96, [(224, 160), (256, 256)], record_property)


def test_weights_that_only_another_size_has_are_refused() -> None:
    """A node left out at the built size (`when`) but made at another would run with untrained weights."""
    wide = {"nodes": {"extra": {"block": "nn.Linear", "args": {"out_features": "in_features"},
                                "when": "input_shape[0] > 6"}}}
    model = build_model({"name": "graph", "in_channels": 6, "input_size": [1, 5], "blocks": {"wide": wide},
                         "nodes": {"sq": {"block": "reshape", "args": {"shape": [6, 5]}}, "w": {"block": "wide"}}})
    assert model.nodes.w(torch.randn(2, 4, 5)).shape == (2, 4, 5)
    with pytest.raises(ConfigError, match=r"it cannot run at \[7, 5\]: node 'extra' has weights only at this size"):
        model.nodes.w(torch.randn(2, 7, 5))
