"""Optimizers and learning-rate schedules built from the `optim` and `sched` configs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from modelforge.errors import ConfigError
from modelforge.optim import build_optimizer, build_scheduler, validate_optim


def _params() -> list[nn.Parameter]:
    return list(nn.Linear(3, 2).parameters())


@pytest.mark.parametrize(("cfg", "cls", "expected"), [
    ({"name": "adam", "lr": 0.01, "weight_decay": 0.1}, torch.optim.Adam,
     {"lr": 0.01, "weight_decay": 0.1, "betas": (0.9, 0.999)}),
    ({"name": "adamw", "lr": 0.002, "betas": [0.8, 0.99]}, torch.optim.AdamW,
     {"lr": 0.002, "weight_decay": 0.0, "betas": (0.8, 0.99)}),
    ({"name": "sgd", "lr": 0.1, "momentum": 0.5, "nesterov": True}, torch.optim.SGD,
     {"lr": 0.1, "momentum": 0.5, "nesterov": True, "weight_decay": 0.0}),
])
def test_optimizer_class_and_settings(cfg: dict, cls: type, expected: dict) -> None:
    optimizer = build_optimizer(_params(), cfg)
    assert type(optimizer) is cls
    group = optimizer.param_groups[0]
    assert {key: group[key] for key in expected} == expected


@pytest.mark.parametrize(("optim", "sched", "match"), [
    ({"name": "sgd", "lr": 0.1, "momentum": 0.0, "nesterov": True}, None, r"optim.nesterov: nesterov needs momentum > 0"),
    ({"name": "adam", "weight_decay": -1.0}, None, r"optim.weight_decay: must be >= 0, got -1.0"),
    ({"name": "adam", "betas": [0.9, 1.0]}, None, r"optim.betas: expected two values in \[0, 1\)"),
    ({"name": "adam"}, {"name": "onecycle", "pct_start": 1.0}, r"sched.pct_start: must be in \(0, 1\), got 1.0"),
    ({"name": "adam"}, {"name": "cosine", "min_lr": -0.1}, r"sched.min_lr: must be >= 0, got -0.1"),
])
def test_bad_settings_name_their_key(optim: dict, sched: dict | None, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        validate_optim(optim, sched)


def _lrs(sched_cfg: dict | None, steps: int, lr: float = 0.1, last_step: int = -1,
         restored_lr: float | None = None) -> list[float]:
    optimizer = torch.optim.SGD(_params(), lr=lr)
    if last_step >= 0:  # as a resumed optimizer has them from its checkpoint
        optimizer.param_groups[0].update(initial_lr=lr, lr=restored_lr)
    scheduler = build_scheduler(optimizer, sched_cfg, total_steps=steps, lr=lr, last_step=last_step)
    seen = []
    for _ in range(steps if last_step < 0 else steps - last_step - 1):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return seen


def test_no_schedule_keeps_the_rate() -> None:
    assert _lrs({"name": "none"}, 5) == [0.1] * 5 and _lrs(None, 3) == [0.1] * 3


def test_onecycle_warms_up_to_its_peak_then_anneals() -> None:
    lrs = _lrs({"name": "onecycle", "max_lr_factor": 10.0, "pct_start": 0.25}, 100)
    peak = max(range(100), key=lrs.__getitem__)
    assert lrs[peak] == pytest.approx(1.0) and 20 <= peak <= 26  # lr * max_lr_factor, a quarter in
    assert lrs[0] == pytest.approx(1.0 / 25)  # OneCycleLR starts at max_lr / div_factor
    assert lrs[-1] < 1e-3


def test_cosine_goes_from_lr_to_min_lr() -> None:
    lrs = _lrs({"name": "cosine", "min_lr": 0.01}, 51)
    assert lrs[0] == pytest.approx(0.1)
    assert lrs[25] == pytest.approx(0.01 + 0.09 * (1 + math.cos(math.pi * 25 / 51)) / 2)
    assert lrs[-1] == pytest.approx(0.01, abs=1e-3)


def test_a_schedule_continued_from_a_step_matches_the_uninterrupted_one() -> None:
    cfg = {"name": "cosine", "min_lr": 0.0}
    uninterrupted = _lrs(cfg, 40)
    assert _lrs(cfg, 40, last_step=9, restored_lr=uninterrupted[10]) == pytest.approx(uninterrupted[10:])
