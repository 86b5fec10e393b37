"""verbose: one log line per targeted module with its exact output shape, for the first calls only."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from torch import Tensor, nn

from modelforge.hooks import build_hook_plugins
from tests.helpers.tiny_net import LEAF_SHAPES, hook_count

LOGGER = "modelforge.hooks.verbose"


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO]


def test_logs_every_leaf_with_type_and_exact_shape(model, batch, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    with build_hook_plugins({"verbose": {}})[0].attach(model):
        model(batch)
    logged = lines(caplog)
    assert len(logged) == len(LEAF_SHAPES)
    for line, (name, (kind, shape)) in zip(logged, LEAF_SHAPES.items()):
        assert re.fullmatch(rf"{re.escape(name)}\s+{kind}\s+-> {re.escape(str(shape))}", line), line


def test_line_format_is_name_type_arrow_shape(model, batch, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    with build_hook_plugins({"verbose": {"layers": ["encoder.0", "decoder.1"]}})[0].attach(model):
        model(batch)
    assert lines(caplog) == ["encoder.0  Conv2d  -> [2, 4, 8, 8]", "decoder.1  Linear  -> [2, 10]"]


def test_only_the_first_max_calls_are_logged_then_the_hooks_are_gone(model, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin = build_hook_plugins({"verbose": {"max_calls": 2, "layers": ["Conv2d"]}})[0]
    plugin.attach(model)
    for batch_size in (3, 4, 5):
        model(torch.zeros(batch_size, 1, 8, 8))
    assert [line.split("-> ")[1] for line in lines(caplog)] == [
        "[3, 4, 8, 8]", "[3, 6, 8, 8]", "[4, 4, 8, 8]", "[4, 6, 8, 8]"]
    assert hook_count(model) == 0  # removed themselves after the second call


def test_calls_count_over_the_plugins_life_so_reattaching_logs_nothing_more(model, batch, caplog) -> None:
    # A run builds its plugins once and attaches them for fit and again for test: one table per run.
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin = build_hook_plugins({"verbose": {"layers": ["decoder.1"]}})[0]
    for _ in range(2):
        with plugin.attach(model) as handle:
            model(batch)
            model(batch)
        assert not handle.attached
    assert lines(caplog) == ["decoder.1  Linear  -> [2, 10]"]
    assert hook_count(model) == 0
    fresh = build_hook_plugins({"verbose": {"layers": ["decoder.1"]}})[0]
    with fresh.attach(model):
        model(batch)
    assert len(lines(caplog)) == 2


class Splitter(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        return x, {"head": x[:, :1], "rest": [x[:, 1:], x.sum()]}


def test_tuple_list_and_dict_outputs(caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    model = nn.Sequential(nn.Linear(3, 4), Splitter())
    with build_hook_plugins({"verbose": {"layers": ["1"]}})[0].attach(model):
        model(torch.zeros(2, 3))
    assert lines(caplog) == ["1  Splitter  -> ([2, 4], {head: [2, 1], rest: ([2, 3], [])})"]


def test_only_rank_zero_logs(model, batch, caplog, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    with build_hook_plugins({"verbose": {}})[0].attach(model):
        model(batch)
    assert lines(caplog) == []
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 0)
    with build_hook_plugins({"verbose": {}})[0].attach(model):
        model(batch)
    assert len(lines(caplog)) == len(LEAF_SHAPES)
