"""Optimizers and learning-rate schedules built from the `optim` and `sched` configs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from modelforge.errors import ConfigError
from modelforge.train.optim import (
    build_optimizer,
    build_scheduler,
    configure_optimizers,
    validate_optim,
)


def _params() -> list[nn.Parameter]:
    return list(nn.Linear(3, 2).parameters())


@pytest.mark.parametrize(("cfg", "cls", "expected"), [
    ({"_target_": "torch.optim.Adam", "lr": 0.01, "weight_decay": 0.1}, torch.optim.Adam,
     {"lr": 0.01, "weight_decay": 0.1, "betas": (0.9, 0.999)}),
    # AdamW's weight_decay is torch's own default (1e-2): the class signature is the one source.
    ({"_target_": "torch.optim.AdamW", "lr": 0.002, "betas": [0.8, 0.99]}, torch.optim.AdamW,
     {"lr": 0.002, "weight_decay": 0.01, "betas": (0.8, 0.99)}),
    ({"_target_": "torch.optim.RMSprop", "alpha": 0.9}, torch.optim.RMSprop, {"lr": 0.01, "alpha": 0.9, "momentum": 0}),
    ({"_target_": "torch.optim.RMSprop"}, torch.optim.RMSprop, {"lr": 0.01}),
    ({"_target_": "torch.optim.NAdam", "lr": 0.01}, torch.optim.NAdam, {"lr": 0.01, "momentum_decay": 0.004}),
    ({"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": 0.5, "nesterov": True}, torch.optim.SGD,
     {"lr": 0.1, "momentum": 0.5, "nesterov": True, "weight_decay": 0.0}),
])
def test_optimizer_class_and_settings(cfg: dict, cls: type, expected: dict) -> None:
    optimizer = build_optimizer(nn.Linear(3, 2), cfg)
    assert type(optimizer) is cls
    group = optimizer.param_groups[0]
    assert {key: group[key] for key in expected} == expected


@pytest.mark.parametrize(("optim", "sched", "match"), [
    ({"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": 0.0, "nesterov": True}, None, r"optim.nesterov: nesterov needs momentum > 0"),
    ({"_target_": "torch.optim.Adam", "weight_decay": -1.0}, None, r"optim.weight_decay: must be >= 0, got -1.0"),
    ({"_target_": "torch.optim.Adam", "betas": [0.9, 1.0]}, None, r"optim.betas: expected two values in \[0, 1\)"),
    ({"_target_": "torch.optim.Adam"}, {"_target_": "modelforge.train.optim.onecycle", "pct_start": 1.0}, r"sched.pct_start: must be in \(0, 1\), got 1.0"),
    ({"_target_": "torch.optim.Adam"}, {"_target_": "modelforge.train.optim.cosine", "min_lr": -0.1}, r"sched.min_lr: must be >= 0, got -0.1"),
    ({"_target_": "torch.optim.Adamm"}, None, r"(?s)optim._target_: cannot import 'torch.optim.Adamm'.*did you mean 'torch.optim.Adam'"),
    ({"_target_": "torch.optim.Adam", "lr": "abc"}, None, r"optim.lr: expected float, got str 'abc'\n  allowed: float\n  hint: optim Adam has lr=0.001 by default"),
    ({"_target_": "torch.optim.Adam", "amsgrd": True}, None, r"(?s)optim.amsgrd: optim Adam has no option 'amsgrd'.*did you mean 'amsgrad'"),
    ({"_target_": "torch.optim.Rprop", "etas": [0.5, 1.2, 3]}, None, r"optim.etas: expected list of 2, got list \[0.5, 1.2, 3\]"),
    ({"_target_": "torch.optim.Adam"}, {"_target_": "torch.optim.lr_scheduler.StepLR"}, r"sched.step_size: missing: sched StepLR needs a value for 'step_size'"),
    ({"_target_": "torch.optim.Adam"}, {"_target_": "torch.optim.lr_scheduler.StepLR", "step_size": 1, "gama": 0.5}, r"(?s)sched.gama: .*did you mean 'gamma'"),
    ({"_target_": "torch.optim.Adam"}, {"_target_": "torch.optim.lr_scheduler.ReduceLROnPlateau", "monitor": "val/nope"}, r"(?s)sched.monitor: unknown metric 'val/nope'.*val/loss"),
    ({"_target_": "torch.optim.Adam"}, {"_target_": "modelforge.train.optim.cosine", "monitor": "val/loss"}, r"sched.monitor: only ReduceLROnPlateau \(sched=plateau\) follows a metric"),
    ({"_target_": "torch.optim.Adam"}, {"_target_": "torch.optim.lr_scheduler.ExponentialLR", "gamma": 0.5, "interval": "batch"}, r"(?s)sched.interval: unknown interval 'batch'"),
    ({"_target_": "torch.optim.Adam"}, {"_target_": "modelforge.train.optim.warmup_cosine", "warmup_pct": 1.5}, r"sched.warmup_pct: must be in \[0, 1\), got 1.5"),
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
    assert _lrs({"_target_": None}, 5) == [0.1] * 5 and _lrs(None, 3) == [0.1] * 3


def test_onecycle_warms_up_to_its_peak_then_anneals() -> None:
    lrs = _lrs({"_target_": "modelforge.train.optim.onecycle", "max_lr_factor": 10.0, "pct_start": 0.25}, 100)
    peak = max(range(100), key=lrs.__getitem__)
    assert lrs[peak] == pytest.approx(1.0) and 20 <= peak <= 26  # lr * max_lr_factor, a quarter in
    assert lrs[0] == pytest.approx(1.0 / 25)  # OneCycleLR starts at max_lr / div_factor
    assert lrs[-1] < 1e-3


def test_cosine_goes_from_lr_to_min_lr() -> None:
    lrs = _lrs({"_target_": "modelforge.train.optim.cosine", "min_lr": 0.01}, 51)
    assert lrs[0] == pytest.approx(0.1)
    assert lrs[25] == pytest.approx(0.01 + 0.09 * (1 + math.cos(math.pi * 25 / 51)) / 2)
    assert lrs[-1] == pytest.approx(0.01, abs=1e-3)


def test_a_schedule_continued_from_a_step_matches_the_uninterrupted_one() -> None:
    cfg = {"_target_": "modelforge.train.optim.cosine", "min_lr": 0.0}
    uninterrupted = _lrs(cfg, 40)
    assert _lrs(cfg, 40, last_step=9, restored_lr=uninterrupted[10]) == pytest.approx(uninterrupted[10:])


@pytest.mark.parametrize("target", ["onecycle", "cosine", "warmup_cosine"])
def test_a_schedule_re_planned_on_resume_follows_the_new_lr(target: str) -> None:
    """The groups a resumed optimizer brings hold the old run's lr (initial_lr, OneCycleLR's max_lr, min_lr):
    re-planned with another optim.lr, the schedule goes on as one planned with it from the start."""
    cfg = {"_target_": f"modelforge.train.optim.{target}"}
    old = torch.optim.SGD(_params(), lr=0.1)
    old_schedule = build_scheduler(old, cfg, total_steps=30, lr=0.1)
    for _ in range(10):
        old.step()
        old_schedule.step()
    resumed = torch.optim.SGD(_params(), lr=0.01)
    resumed.load_state_dict(old.state_dict())  # what Lightning restores from the checkpoint
    assert resumed.param_groups[0]["initial_lr"] == pytest.approx(0.1 / 25 if target == "onecycle" else 0.1)
    build_scheduler(resumed, cfg, total_steps=40, lr=0.01, last_step=9)
    planned_so = _lrs(cfg, 40, lr=0.01)
    assert resumed.param_groups[0]["lr"] == pytest.approx(planned_so[10])


def test_every_torch_optimizer_is_registered_and_builds() -> None:
    from modelforge.registry import OPTIMIZERS

    classes = {name: cls for name, cls in vars(torch.optim).items()
               if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer}
    assert {"adam", "adamw", "sgd", "rmsprop", "adagrad", "lbfgs"} <= set(OPTIMIZERS.names())
    for attr, cls in classes.items():
        assert OPTIMIZERS.get(attr.lower()) is cls
    assert type(build_optimizer(nn.Linear(2, 2), {"_target_": "torch.optim.Adagrad"})) is torch.optim.Adagrad


def test_no_decay_norm_bias_puts_norms_and_biases_in_a_group_without_weight_decay() -> None:
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 2), nn.LayerNorm(2))
    optimizer = build_optimizer(model, {"_target_": "torch.optim.AdamW", "weight_decay": 0.05, "no_decay_norm_bias": True})
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.05 and plain["weight_decay"] == 0.0
    assert {id(p) for p in decayed["params"]} == {id(model[0].weight), id(model[3].weight)}
    assert len(plain["params"]) == 6  # conv bias, bn weight+bias, linear bias, layernorm weight+bias
    single = build_optimizer(model, {"_target_": "torch.optim.AdamW", "weight_decay": 0.05})
    assert len(single.param_groups) == 1 and single.param_groups[0]["weight_decay"] == 0.05


@pytest.mark.parametrize(("cfg", "expected"), [
    ({"_target_": "torch.optim.lr_scheduler.StepLR", "step_size": 2, "gamma": 0.5}, [0.1, 0.1, 0.05, 0.05, 0.025]),
    ({"_target_": "torch.optim.lr_scheduler.MultiStepLR", "milestones": [1, 3]}, [0.1, 0.01, 0.01, 0.001, 0.001]),
    ({"_target_": "torch.optim.lr_scheduler.ExponentialLR", "gamma": 0.5}, [0.1, 0.05, 0.025, 0.0125, 0.00625]),
])
def test_epoch_schedules_follow_torch(cfg: dict, expected: list[float]) -> None:
    assert _lrs(cfg, 5) == pytest.approx(expected)
    from modelforge.train.optim import configure_optimizers

    assert configure_optimizers(nn.Linear(3, 2), {"_target_": "torch.optim.SGD", "lr": 0.1}, cfg, 5)["lr_scheduler"]["interval"] == "epoch"


def test_warmup_cosine_ramps_up_linearly_then_anneals_to_min_lr() -> None:
    lrs = _lrs({"_target_": "modelforge.train.optim.warmup_cosine", "warmup_pct": 0.1, "min_lr": 0.01}, 100)
    assert lrs[:3] == pytest.approx([0.01, 0.02, 0.03]) and lrs[9] == pytest.approx(0.1)
    assert lrs[10] == pytest.approx(0.1) and lrs[-1] == pytest.approx(0.01, abs=1e-4)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


def test_plateau_follows_its_monitor_with_the_mode_of_the_metric() -> None:
    from modelforge.train.optim import configure_optimizers

    model = nn.Linear(3, 2)
    for monitor, mode in (("val/loss", "min"), ("val/acc", "max")):
        out = configure_optimizers(model, {"_target_": "torch.optim.SGD", "lr": 0.1}, {"_target_": "torch.optim.lr_scheduler.ReduceLROnPlateau", "monitor": monitor}, 10)
        config = out["lr_scheduler"]
        assert isinstance(config["scheduler"], torch.optim.lr_scheduler.ReduceLROnPlateau)
        assert config["monitor"] == monitor and config["interval"] == "epoch" and config["scheduler"].mode == mode
    onecycle = configure_optimizers(model, {"_target_": "torch.optim.Adam"}, {"_target_": "modelforge.train.optim.onecycle"}, 10)["lr_scheduler"]
    assert onecycle["interval"] == "step" and "monitor" not in onecycle


@pytest.mark.parametrize(("optim", "message"), [
    ({"name": "sgd"}, r"(?s)optim.name: optim is chosen by _target_ now.*optim._target_=torch.optim.SGD"),
    ({"_target_": "os.system"}, r"optim._target_: 'os.system' is not a class modelforge may import"),
    ({"_target_": "torch.optim.lr_scheduler.StepLR"}, r"optim._target_: .*StepLR is not a subclass of torch.optim.Optimizer"),
    ({"_target_": "torch.optim.SGD", "param_groups": {"0.*": {"lr_mul": 0.1}}}, r"(?s)lr_mul: no setting.*'lr_mult'"),
    ({"_target_": "torch.optim.SGD", "param_groups": {"0.*": {"lr_mult": 0}}}, r"optim.param_groups.0.\*.lr_mult"),
])
def test_optimizer_targets_are_checked_before_import(optim, message):
    with pytest.raises(ConfigError, match=message):
        validate_optim(optim, None)


def test_param_groups_set_lr_and_weight_decay_per_glob_and_onecycle_keeps_the_ratio():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    model[0].weight.requires_grad_(False)  # frozen: in no group
    cfg = {"_target_": "torch.optim.SGD", "lr": 0.1, "weight_decay": 0.01,
           "param_groups": {"2.*": {"lr_mult": 0.5, "weight_decay": 0.0}}}
    out = configure_optimizers(model, cfg, {"_target_": "modelforge.train.optim.onecycle"}, 20)
    groups = out["optimizer"].param_groups
    assert [len(g["params"]) for g in groups] == [2, 3]  # model.2's weight and bias; then 0.bias and the norm's
    assert groups[0]["params"][0] is model[2].weight and groups[0]["weight_decay"] == 0.0
    assert groups[1]["weight_decay"] == 0.01
    assert [g["max_lr"] for g in groups] == pytest.approx([0.05, 0.1])
    with pytest.raises(ConfigError, match=r"(?s)optim.param_groups.3.\*: matches no trainable parameter.*did you mean '[012]\.\*'"):
        build_optimizer(model, {**cfg, "param_groups": {"3.*": {"lr_mult": 2.0}}})


def test_a_fully_frozen_model_is_one_error():
    model = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ConfigError, match="every parameter of the model is frozen"):
        build_optimizer(model, {"_target_": "torch.optim.SGD", "lr": 0.1})


ONECYCLE = {"_target_": "modelforge.train.optim.onecycle"}
TORCH_OPTIMIZERS = sorted(name for name, cls in vars(torch.optim).items()
                          if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)
                          and cls is not torch.optim.Optimizer)


@pytest.mark.parametrize("name", TORCH_OPTIMIZERS)
def test_the_default_schedule_takes_every_torch_optimizer(name: str) -> None:
    validate_optim({"_target_": f"torch.optim.{name}"}, ONECYCLE)  # Adagrad: torch's cycle_momentum refused it


@pytest.mark.parametrize(("optim", "cycled"), [
    ({"_target_": "torch.optim.Adam"}, "betas"),
    ({"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": 0.9}, "momentum"),
    ({"_target_": "torch.optim.SGD", "lr": 0.1}, None),  # momentum 0: the schedule gives it none
    ({"_target_": "torch.optim.Adagrad", "lr_decay": 1e-4}, None),
])
def test_onecycle_cycles_the_momentum_only_where_the_optimizer_has_one(optim: dict, cycled: str | None) -> None:
    optimizer = build_optimizer(nn.Linear(2, 2), optim)
    scheduler = build_scheduler(optimizer, ONECYCLE, total_steps=20, lr=optimizer.defaults["lr"])
    group = optimizer.param_groups[0]
    before = {k: group.get(k) for k in ("momentum", "betas")}
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    moved = [k for k in ("momentum", "betas") if group.get(k) != before[k]]
    assert moved == ([cycled] if cycled else [])
    assert scheduler.cycle_momentum is (cycled is not None)


def test_cycle_momentum_true_without_a_momentum_says_what_to_set() -> None:
    with pytest.raises(ConfigError, match=r"sched.cycle_momentum: Adagrad has no momentum or betas to cycle\n"
                                          r"  hint: sched.cycle_momentum=false"):
        validate_optim({"_target_": "torch.optim.Adagrad"}, {**ONECYCLE, "cycle_momentum": True})
    sgd = build_optimizer(nn.Linear(2, 2), {"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": 0.9})
    scheduler = build_scheduler(sgd, {**ONECYCLE, "cycle_momentum": False}, total_steps=20, lr=0.1)
    sgd.step()
    scheduler.step()
    assert sgd.param_groups[0]["momentum"] == 0.9


def test_param_groups_are_named_by_their_globs() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3), nn.Linear(3, 2))

    def named(groups: dict | None, no_decay: bool = False) -> list[str | None]:
        optim = {"_target_": "torch.optim.Adam", "param_groups": groups, "no_decay_norm_bias": no_decay}
        return [g.get("name") for g in build_optimizer(model, optim).param_groups]

    assert named(None) == [None]  # one group: Lightning logs it as lr-Adam
    assert named({"0.*": {"lr_mult": 0.1}}) == ["0.*", "other"]
    assert named({"0.*": {"lr_mult": 0.1}}, True) == ["0.*", "0.*/no_decay", "other", "other/no_decay"]
    renamed = nn.Module()
    renamed.other, renamed.rest = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
    groups = build_optimizer(renamed, {"_target_": "torch.optim.Adam", "param_groups": {"other": {}}}).param_groups
    assert [g["name"] for g in groups] == ["other", "other (rest)"]
