"""Optimizers and learning-rate schedules from the ``optim`` and ``sched`` configs.

Schedules are stepped every batch, so they need the total number of steps,
which the trainer knows only once fitting starts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from modelforge.config import require_positive, validate
from modelforge.errors import ConfigError
from modelforge.registry import OPTIMIZERS, SCHEDULERS


@dataclass
class AdamConfig:
    name: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])

    def check(self, path: str) -> None:
        _check_lr_wd(self, path)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"{path}.betas", f"expected two values in [0, 1), got {self.betas}")


@dataclass
class SGDConfig:
    name: str = "sgd"
    lr: float = 0.05
    weight_decay: float = 0.0
    momentum: float = 0.9
    nesterov: bool = False

    def check(self, path: str) -> None:
        _check_lr_wd(self, path)
        if self.momentum < 0:
            raise ConfigError(f"{path}.momentum", f"must be >= 0, got {self.momentum}")
        if self.nesterov and self.momentum <= 0:
            raise ConfigError(f"{path}.nesterov", "nesterov needs momentum > 0")


def _check_lr_wd(cfg: Any, path: str) -> None:
    require_positive(cfg.lr, f"{path}.lr")
    if cfg.weight_decay < 0:
        raise ConfigError(f"{path}.weight_decay", f"must be >= 0, got {cfg.weight_decay}")


def _adam_like(cls: type[torch.optim.Optimizer]) -> Any:
    def factory(params: Iterable, lr: float, weight_decay: float, betas: list[float]) -> torch.optim.Optimizer:
        return cls(params, lr=lr, weight_decay=weight_decay, betas=tuple(betas))

    factory.__doc__ = cls.__doc__
    return factory


OPTIMIZERS.add("adam", _adam_like(torch.optim.Adam), schema=AdamConfig, description="Adam (torch.optim.Adam)")
OPTIMIZERS.add("adamw", _adam_like(torch.optim.AdamW), schema=AdamConfig,
               description="AdamW, decoupled weight decay (torch.optim.AdamW)")
OPTIMIZERS.add("sgd", torch.optim.SGD, schema=SGDConfig, description="SGD with momentum / nesterov (torch.optim.SGD)")


@dataclass
class NoScheduleConfig:
    name: str = "none"


@dataclass
class OneCycleConfig:
    name: str = "onecycle"
    max_lr_factor: float = 10.0
    pct_start: float = 0.25

    def check(self, path: str) -> None:
        require_positive(self.max_lr_factor, f"{path}.max_lr_factor")
        if not 0.0 < self.pct_start < 1.0:
            raise ConfigError(f"{path}.pct_start", f"must be in (0, 1), got {self.pct_start}")


@dataclass
class CosineConfig:
    name: str = "cosine"
    min_lr: float = 0.0

    def check(self, path: str) -> None:
        if self.min_lr < 0:
            raise ConfigError(f"{path}.min_lr", f"must be >= 0, got {self.min_lr}")


def _no_schedule(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, last_step: int = -1) -> None:
    """Constant learning rate."""
    return None


def _onecycle(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, max_lr_factor: float,
              pct_start: float, last_step: int = -1) -> torch.optim.lr_scheduler.LRScheduler:
    """One-cycle: warm up to lr * max_lr_factor, then anneal (OneCycleLR)."""
    # OneCycleLR divides by zero when the warm-up phase is under two steps (tiny smoke runs):
    # plan at least that many; a run that stops earlier just never finishes the cycle.
    planned = max(total_steps, math.ceil(2 / pct_start) + 1)
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr * max_lr_factor, total_steps=planned, pct_start=pct_start, last_epoch=last_step
    )


def _cosine(optimizer: torch.optim.Optimizer, total_steps: int, lr: float,
            min_lr: float, last_step: int = -1) -> torch.optim.lr_scheduler.LRScheduler:
    """Cosine annealing from optim.lr to min_lr over the run (CosineAnnealingLR)."""
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps, eta_min=min_lr,
                                                      last_epoch=last_step)


SCHEDULERS.add("none", _no_schedule, schema=NoScheduleConfig)
SCHEDULERS.add("onecycle", _onecycle, schema=OneCycleConfig)
SCHEDULERS.add("cosine", _cosine, schema=CosineConfig)


def _checked(registry: Any, cfg: Mapping[str, Any], path: str) -> dict[str, Any]:
    name = cfg.get("name")
    registry.get(name, path=f"{path}.name")
    return dataclasses.asdict(validate(dict(cfg), registry.schema(name), path, f"{path} {name!r}"))


def validate_optim(optim_cfg: Mapping[str, Any], sched_cfg: Mapping[str, Any] | None) -> None:
    """Check both configs before any work starts."""
    _checked(OPTIMIZERS, optim_cfg, "optim")
    _checked(SCHEDULERS, sched_cfg or {"name": "none"}, "sched")


def build_optimizer(params: Iterable, optim_cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    options = _checked(OPTIMIZERS, optim_cfg, "optim")
    return OPTIMIZERS.get(options.pop("name"))(params, **options)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    sched_cfg: Mapping[str, Any] | None,
    total_steps: int,
    lr: float,
    last_step: int = -1,
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The schedule over ``total_steps``; ``last_step`` >= 0 continues one from that step."""
    options = _checked(SCHEDULERS, sched_cfg or {"name": "none"}, "sched")
    scheduler = SCHEDULERS.get(options.pop("name"))(optimizer, total_steps=total_steps, lr=lr,
                                                    last_step=last_step, **options)
    if scheduler is not None:
        # Saved with the scheduler's state, so a resumed run can tell it was planned for another length.
        scheduler.planned_steps = total_steps
    return scheduler


def schedule_length(scheduler: torch.optim.lr_scheduler.LRScheduler) -> int | None:
    """The number of steps a schedule built by :func:`build_scheduler` was planned for."""
    return getattr(scheduler, "planned_steps", None)
