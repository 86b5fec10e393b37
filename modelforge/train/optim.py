"""Optimizers and learning-rate schedules from the ``optim`` and ``sched`` configs.

``optim.name`` is any optimizer class of ``torch.optim`` (any case: ``rmsprop``, ``RMSprop``) or a name a
plugin registered; its options and their defaults are the class's own signature. ``sched.name`` picks a
schedule: the ones planned over the whole run (``onecycle``, ``cosine``, ``warmup_cosine``) step every batch
and need the run's total steps, known only once fitting starts; ``sched.epochs`` plans them over that many
epochs instead (a 1-epoch run with ``sched.epochs=2``, resumed with ``trainer.max_epochs=2``, gives what 2
epochs in one go give). torch's epoch schedules (``step``, ``multistep``, ``exponential``, ``plateau``) step
every epoch. ``sched.interval``, ``.frequency`` and ``.monitor`` are Lightning's lr_scheduler settings.
An option set to null takes the default of the class or factory: the YAML files list keys without defaults.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from modelforge.config import check_call, require_positive, signature_defaults
from modelforge.errors import ConfigError, UnknownNameError
from modelforge.registry import OPTIMIZERS, SCHEDULERS

_LR_SCHEDULER = torch.optim.lr_scheduler
LIGHTNING_SCHED_KEYS = ("interval", "frequency", "monitor")  # for Lightning's lr_scheduler config, not the schedule
MONITORABLE = ("val/loss", "val/acc", "train/loss", "train/acc")  # logged once per epoch: plateau can follow them
_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm, nn.LocalResponseNorm, nn.RMSNorm)

for _attr, _cls in sorted(vars(torch.optim).items()):  # every optimizer class of torch.optim: the allow-list
    if isinstance(_cls, type) and issubclass(_cls, torch.optim.Optimizer) and _cls is not torch.optim.Optimizer:
        OPTIMIZERS.add(_attr.lower(), _cls, description=f"torch.optim.{_attr}")


def _optimizer_options(optim_cfg: Mapping[str, Any]) -> tuple[Any, dict[str, Any], bool]:
    """Check ``optim_cfg``; return (class, keyword arguments, no_decay_norm_bias)."""
    # null means "the class's default": conf/optim lists keys as null so optim.lr=... needs no +.
    options = {k: v for k, v in optim_cfg.items() if v is not None}
    name = options.pop("name", None)
    if isinstance(name, str) and name not in OPTIMIZERS and name.lower() in OPTIMIZERS:
        name = name.lower()  # torch's names match in any case
    cls = OPTIMIZERS.get(name, path="optim.name")
    no_decay = options.pop("no_decay_norm_bias", False)
    if not isinstance(no_decay, bool):
        raise ConfigError("optim.no_decay_norm_bias", f"got {no_decay!r}", allowed="true or false")
    check_call(cls, options, "optim", f"optim {name!r}", skip=("params",), verb="has")
    # torch checks these too, but its words name no config key.
    if "lr" in options:
        require_positive(options["lr"], "optim.lr")
    for key in ("weight_decay", "momentum"):
        if options.get(key, 0) < 0:
            raise ConfigError(f"optim.{key}", f"must be >= 0, got {options[key]}")
    betas = options.get("betas")
    if betas is not None and (len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas)):
        raise ConfigError("optim.betas", f"expected two values in [0, 1), got {list(betas)}")
    if options.get("nesterov") and options.get("momentum", 0) <= 0:
        raise ConfigError("optim.nesterov", "nesterov needs momentum > 0")
    try:
        defaults = signature_defaults(cls)
    except (TypeError, ValueError):
        defaults = {}
    if no_decay:  # param_groups needs it explicitly: the class's default goes to the decayed group only
        options.setdefault("weight_decay", defaults.get("weight_decay", 0.0))
    # YAML gives lists; torch's tuple-valued options (betas, etas, step_sizes) want tuples.
    kwargs = {k: tuple(v) if isinstance(defaults.get(k), tuple) and isinstance(v, list) else v
              for k, v in options.items()}
    return cls, kwargs, no_decay


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups: weights with ``weight_decay``, and norm-layer parameters and biases without it."""
    no_decay = {id(p) for m in model.modules() for pname, p in m.named_parameters(recurse=False)
                if isinstance(m, _NORM_TYPES) or pname.endswith("bias")}
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if id(p) not in no_decay], "weight_decay": weight_decay},
              {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(params: nn.Module | Iterable, optim_cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    """The optimizer ``optim_cfg`` names, over a module's parameters (or any iterable of them)."""
    cls, kwargs, no_decay = _optimizer_options(optim_cfg)
    if no_decay:
        if not isinstance(params, nn.Module):
            raise ConfigError("optim.no_decay_norm_bias", "needs the model, not a list of parameters")
        return cls(param_groups(params, kwargs.pop("weight_decay")), **kwargs)
    return cls(params.parameters() if isinstance(params, nn.Module) else params, **kwargs)


# --- schedules -------------------------------------------------------------------------------

def _no_schedule(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, last_step: int = -1) -> None:
    """Constant learning rate."""


def _onecycle(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, max_lr_factor: float = 1.0,
              pct_start: float = 0.25, last_step: int = -1) -> _LR_SCHEDULER.LRScheduler:
    """One-cycle: warm up to lr * max_lr_factor (1: optim.lr is the peak), then anneal (OneCycleLR), every batch."""
    require_positive(max_lr_factor, "sched.max_lr_factor")
    if not 0.0 < pct_start < 1.0:
        raise ConfigError("sched.pct_start", f"must be in (0, 1), got {pct_start}")
    # OneCycleLR divides by zero when the warm-up phase is under two steps (tiny smoke runs):
    # plan at least that many; a run that stops earlier just never finishes the cycle.
    planned = max(total_steps, math.ceil(2 / pct_start) + 1)
    return _LR_SCHEDULER.OneCycleLR(optimizer, max_lr=lr * max_lr_factor, total_steps=planned,
                                    pct_start=pct_start, last_epoch=last_step)


def _cosine(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, min_lr: float = 0.0,
            last_step: int = -1) -> _LR_SCHEDULER.LRScheduler:
    """Cosine annealing from optim.lr to min_lr over the run (CosineAnnealingLR), every batch."""
    if min_lr < 0:
        raise ConfigError("sched.min_lr", f"must be >= 0, got {min_lr}")
    return _LR_SCHEDULER.CosineAnnealingLR(optimizer, T_max=total_steps, eta_min=min_lr, last_epoch=last_step)


def _warmup_cosine(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, warmup_pct: float = 0.05,
                   min_lr: float = 0.0, last_step: int = -1) -> _LR_SCHEDULER.LRScheduler:
    """Linear warm-up from 0 over warmup_pct of the run, then cosine to min_lr, every batch."""
    if not 0.0 <= warmup_pct < 1.0:
        raise ConfigError("sched.warmup_pct", f"must be in [0, 1), got {warmup_pct}")
    if min_lr < 0:
        raise ConfigError("sched.min_lr", f"must be >= 0, got {min_lr}")
    warmup = round(warmup_pct * total_steps)
    floor = min_lr / lr

    def factor(step: int) -> float:  # closed form, so a resumed run continues from last_step
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / max(total_steps - warmup, 1), 1.0)
        return floor + (1.0 - floor) * (1 + math.cos(math.pi * progress)) / 2

    return _LR_SCHEDULER.LambdaLR(optimizer, factor, last_epoch=last_step)


SCHEDULERS.add("none", _no_schedule)
SCHEDULERS.add("onecycle", _onecycle)
SCHEDULERS.add("cosine", _cosine)
SCHEDULERS.add("warmup_cosine", _warmup_cosine)
SCHEDULERS.add("step", _LR_SCHEDULER.StepLR, description="lr * gamma every step_size epochs (StepLR)")
SCHEDULERS.add("multistep", _LR_SCHEDULER.MultiStepLR, description="lr * gamma at each epoch in milestones (MultiStepLR)")
SCHEDULERS.add("exponential", _LR_SCHEDULER.ExponentialLR, description="lr * gamma every epoch (ExponentialLR)")
SCHEDULERS.add("plateau", _LR_SCHEDULER.ReduceLROnPlateau,
               description="lr * factor when sched.monitor stops improving for patience epochs (ReduceLROnPlateau)")


def _sched_options(sched_cfg: Mapping[str, Any] | None) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Check ``sched_cfg``; return (factory, its options, Lightning's lr_scheduler settings)."""
    options = {k: v for k, v in (sched_cfg or {"name": "none"}).items() if v is not None}
    name = options.pop("name", "none")
    factory = SCHEDULERS.get(name, path="sched.name")
    lightning = {k: options.pop(k) for k in LIGHTNING_SCHED_KEYS if k in options}
    planned = not isinstance(factory, type)  # a factory of ours, planned over the run's total steps
    epochs = options.pop("epochs", None)  # modelforge's, not the factory's (module docstring)
    if epochs is not None:
        if not planned or name == "none":
            raise ConfigError("sched.epochs", f"sched {name!r} is not planned over the run, so it spans no epochs",
                              allowed="sched.epochs with onecycle, cosine or warmup_cosine")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ConfigError("sched.epochs", f"got {epochs!r}", allowed="null (trainer.max_epochs) or an integer >= 1")
    # Arguments modelforge passes itself; Lightning restores a torch class's position (last_epoch) on resume.
    skip = ("optimizer", "total_steps", "lr", "last_step") if planned else ("optimizer", "last_epoch")
    check_call(factory, options, "sched", f"sched {name!r}", skip=skip, verb="has")
    interval = lightning.setdefault("interval", "step" if planned else "epoch")
    if interval not in ("step", "epoch"):
        raise UnknownNameError("interval", interval, ("step", "epoch"), path="sched.interval")
    if not planned and issubclass(factory, _LR_SCHEDULER.ReduceLROnPlateau):
        monitor = lightning.setdefault("monitor", "val/loss")
        if monitor not in MONITORABLE:
            raise UnknownNameError("metric", monitor, MONITORABLE, path="sched.monitor")
        options.setdefault("mode", "max" if monitor.endswith("acc") else "min")
    elif "monitor" in lightning:
        raise ConfigError("sched.monitor", f"only sched=plateau follows a metric, not {name!r}")
    return factory, options, lightning


def validate_optim(optim_cfg: Mapping[str, Any], sched_cfg: Mapping[str, Any] | None) -> None:
    """Check both configs before any work starts, by building them on a throwaway parameter."""
    _optimizer_options(optim_cfg)
    _sched_options(sched_cfg)
    key = "optim"
    try:
        optimizer = build_optimizer(nn.Linear(2, 2), optim_cfg)  # 2-D: some optimizers (Muon) take matrices only
        key = "sched"
        build_scheduler(optimizer, sched_cfg, total_steps=100, lr=optimizer.defaults.get("lr", 1e-3))
    except ConfigError:
        raise
    except (ValueError, TypeError, RuntimeError) as exc:
        raise ConfigError(key, f"torch refused these options: {exc}") from None


def build_scheduler(optimizer: torch.optim.Optimizer, sched_cfg: Mapping[str, Any] | None, total_steps: int,
                    lr: float, last_step: int = -1) -> Any:
    """The schedule; a planned one spans ``total_steps`` and ``last_step`` >= 0 continues it from there."""
    factory, options, _ = _sched_options(sched_cfg)
    if isinstance(factory, type):
        return factory(optimizer, **options)
    scheduler = factory(optimizer, total_steps=total_steps, lr=lr, last_step=last_step, **options)
    if scheduler is not None:
        # Saved with the scheduler's state, so a resumed run can tell it was planned for another length.
        scheduler.planned_steps = total_steps
    return scheduler


def configure_optimizers(model: nn.Module, optim_cfg: Mapping[str, Any], sched_cfg: Mapping[str, Any] | None,
                         total_steps: int) -> Any:
    """What ``LightningModule.configure_optimizers`` returns: the optimizer, with Lightning's lr_scheduler dict."""
    optimizer = build_optimizer(model, optim_cfg)
    scheduler = build_scheduler(optimizer, sched_cfg, total_steps, optimizer.defaults["lr"])
    if scheduler is None:
        return optimizer
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, **_sched_options(sched_cfg)[2]}}
