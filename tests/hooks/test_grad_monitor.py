"""grad_monitor: per-layer norms equal torch.linalg.vector_norm of the gradients; logging and warnings."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from modelforge.hooks import build_hook_plugins
from tests.helpers.tiny_net import PARAM_LAYERS, forward_backward

LOGGER = "modelforge.hooks.grad_monitor"


def expected_norm(module: nn.Module) -> float:
    return torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in module.parameters()])).item()


class RecordingLogger:
    def __init__(self) -> None:
        self.calls: list[tuple[dict, int]] = []

    def log_metrics(self, metrics: dict, step: int) -> None:
        self.calls.append((dict(metrics), step))


def test_norms_equal_vector_norm_of_each_layers_gradients(model, batch) -> None:
    plugin = build_hook_plugins({"grad_monitor": {}})[0]
    with plugin.attach(model):
        forward_backward(model, batch)
    modules = dict(model.named_modules())
    assert list(plugin.norms) == PARAM_LAYERS
    for name, value in plugin.norms.items():
        assert value == pytest.approx(expected_norm(modules[name]), rel=1e-6), name
        assert value > 0


def test_a_chosen_container_gets_one_norm_over_all_its_parameters(model, batch) -> None:
    plugin = build_hook_plugins({"grad_monitor": {"layers": ["encoder", "decoder.1"]}})[0]
    with plugin.attach(model):
        forward_backward(model, batch)
    assert plugin.norms == {"encoder": pytest.approx(expected_norm(model.encoder), rel=1e-6),
                            "decoder.1": pytest.approx(expected_norm(model.decoder[1]), rel=1e-6)}


def test_norms_are_per_backward_and_history_is_bounded(model) -> None:
    plugin = build_hook_plugins({"grad_monitor": {"layers": ["decoder.1"], "history": 2}})[0]
    seen = []
    with plugin.attach(model):
        for scale in (1.0, 2.0, 3.0):
            model.zero_grad()
            forward_backward(model, torch.full((2, 1, 8, 8), scale))
            seen.append(expected_norm(model.decoder[1]))
    assert plugin.history("decoder.1") == [(1, pytest.approx(seen[1], rel=1e-6)), (2, pytest.approx(seen[2], rel=1e-6))]


def test_grad_clip_listed_first_is_seen_by_the_monitor(model, batch) -> None:
    clip, monitor = build_hook_plugins({"grad_clip": {"value": 0.01}, "grad_monitor": {}})
    with clip.attach(model), monitor.attach(model):
        forward_backward(model, batch)
    modules = dict(model.named_modules())
    for name, value in monitor.norms.items():
        assert value == pytest.approx(expected_norm(modules[name]), rel=1e-6)  # .grad holds the clamped values


def test_logs_to_the_lightning_logger_every_log_every_steps(model, batch) -> None:
    logger = RecordingLogger()
    plugin = build_hook_plugins({"grad_monitor": {"log_every": 2}})[0]
    with plugin.attach(model, logger=logger):
        for _ in range(3):
            forward_backward(model, batch)
            norms_now = dict(plugin.norms)
    assert [step for _, step in logger.calls] == [0, 2]
    assert logger.calls[-1][0] == {f"grad_norm/{n}": v for n, v in norms_now.items()}


def test_trainer_step_is_used_when_the_callback_sets_it(model, batch) -> None:
    logger = RecordingLogger()
    plugin = build_hook_plugins({"grad_monitor": {"log_every": 10}})[0]
    with plugin.attach(model, logger=logger):
        plugin.step = 30
        forward_backward(model, batch)
    assert [step for _, step in logger.calls] == [30]
    assert plugin.history("decoder.1")[0][0] == 30


def test_exploding_warnings_are_rate_limited_per_layer(model, batch, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    plugin = build_hook_plugins({"grad_monitor": {"max_norm": 1e-6, "warn_every": 2, "layers": ["Conv2d"]}})[0]
    with plugin.attach(model):
        for _ in range(5):
            forward_backward(model, batch)
    warned = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(warned) == 6  # steps 0, 2 and 4 for each of the two layers
    assert warned[0].startswith("gradient norm of encoder.0 at step 0 is exploding: ")
    assert warned[0].endswith("> max_norm=1e-06")


def test_vanishing_warns_only_once_the_norm_stays_below_min_norm(model, batch, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    options = {"max_norm": None, "min_norm": 1e6, "vanish_steps": 3, "warn_every": 1, "layers": ["decoder.1"]}
    plugin = build_hook_plugins({"grad_monitor": options})[0]
    with plugin.attach(model):
        for _ in range(4):
            forward_backward(model, batch)
    messages = [r.getMessage() for r in caplog.records]
    assert [m.split(" at step ")[1].split(" ")[0] for m in messages] == ["2", "3"]  # the 3rd and 4th backward
    assert messages[0].endswith("< min_norm=1e+06 for 3 backward passes in a row")


def test_a_normal_norm_restarts_the_vanishing_count(model, batch, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    plugin = build_hook_plugins({"grad_monitor": {"max_norm": None, "min_norm": 1e6, "vanish_steps": 2,
                                                  "warn_every": 1, "layers": ["decoder.1"]}})[0]
    with plugin.attach(model):
        forward_backward(model, batch)
        plugin.options.min_norm = 0.0  # one backward with a norm above min_norm
        forward_backward(model, batch)
        plugin.options.min_norm = 1e6
        forward_backward(model, batch)
    assert caplog.records == []  # never two in a row


def test_no_warnings_for_ordinary_gradients(model, batch, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with build_hook_plugins({"grad_monitor": {}})[0].attach(model):
        forward_backward(model, batch)
    assert [r for r in caplog.records if r.name == LOGGER] == []
