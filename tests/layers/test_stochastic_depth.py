"""Stochastic depth: which samples it drops, how it scales the rest, when it does nothing, its errors.

Its masks equal torchvision's for the same seed: tests/models/test_torchvision_parity.py.
"""

from __future__ import annotations

import pytest
import torch

from modelforge import ConfigError, build_model
from modelforge.layers import StochasticDepth


def test_row_mode_drops_whole_samples_and_scales_the_rest() -> None:
    torch.manual_seed(0)
    x = torch.rand(4000, 3, 2, 2) + 1.0  # no zeros of its own
    out = StochasticDepth(0.25, "row").train()(x)
    dropped = (out == 0).flatten(1).all(1)
    kept = ~dropped
    assert not (out[dropped] != 0).any()
    torch.testing.assert_close(out[kept], x[kept] / 0.75)
    assert 0.22 < dropped.float().mean().item() < 0.28  # 1,000 of 4,000 expected; seeded, so not flaky


def test_batch_mode_drops_the_whole_batch_or_nothing() -> None:
    x = torch.rand(8, 3) + 1.0
    outcomes = set()
    for seed in range(20):
        torch.manual_seed(seed)
        out = StochasticDepth(0.5, "batch").train()(x)
        if (out == 0).all():
            outcomes.add("dropped")
        else:
            torch.testing.assert_close(out, x * 2)
            outcomes.add("kept")
    assert outcomes == {"dropped", "kept"}


def test_identity_in_eval_mode_and_at_p_0_without_drawing() -> None:
    x = torch.randn(5, 4)
    assert StochasticDepth(0.9).eval()(x) is x
    state = torch.get_rng_state()
    assert StochasticDepth(0.0).train()(x) is x
    assert torch.equal(torch.get_rng_state(), state)
    assert (StochasticDepth(1.0).train()(x) == 0).all()


@pytest.mark.parametrize(("args", "message"), [
    ({"p": 1.5}, r"model\.nodes\.drop\.args\.p: node 'drop' \(stochastic_depth\): a drop probability is between 0 and 1, got 1\.5"),
    ({"p": 0.1, "mode": "rows"}, r"(?s)model\.nodes\.drop\.args\.mode: node 'drop' \(stochastic_depth\): unknown mode 'rows'"
                                 r".*did you mean 'row'\?.*allowed: row, batch"),
])
def test_bad_arguments_are_one_config_error_naming_the_node(args: dict, message: str) -> None:
    nodes = {"flat": {"block": "flatten"}, "drop": {"block": "stochastic_depth", "args": args}}
    with pytest.raises(ConfigError, match=message):
        build_model({"name": "graph", "nodes": nodes})
