"""Optimizers and learning-rate schedules from the ``optim`` and ``sched`` configs.

Each is ``{_target_: CALLABLE, **its arguments}``, built by ``hydra.utils.instantiate`` (``_partial_``, then
called with the parameters or the optimizer). ``optim._target_`` is any optimizer class of ``torch.optim``
(``torch.optim.NAdam``) or one a plugin registered in OPTIMIZERS; its options and their defaults are the
class's own signature. ``sched._target_`` is a class of ``torch.optim.lr_scheduler`` (``StepLR``,
``ReduceLROnPlateau``: stepped every epoch) or a schedule of this module planned over the whole run
(``onecycle``, ``cosine``, ``warmup_cosine``: stepped every batch), which needs the run's total steps, known
only once fitting starts; ``sched.epochs`` plans them over that many epochs instead (a 1-epoch run with
``sched.epochs=2``, resumed with ``trainer.max_epochs=2``, gives what 2 epochs in one go give). No
``_target_``: a constant lr. ``sched.interval``, ``.frequency`` and ``.monitor`` are Lightning's
lr_scheduler settings. ``optim.no_decay_norm_bias`` and ``optim.param_groups`` (per-glob ``lr_mult`` and
``weight_decay``) are modelforge's. An option set to null takes the default of the class or factory.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any

import torch
from torch import nn

from modelforge.config import (
    check_call,
    public_name,
    require_positive,
    resolve_target,
    signature_defaults,
)
from modelforge.config_types import check_type, fits
from modelforge.errors import (
    ConfigError,
    UnknownKeyError,
    UnknownNameError,
    closest_globs,
)
from modelforge.registry import OPTIMIZERS, SCHEDULERS

_LR_SCHEDULER = torch.optim.lr_scheduler
LIGHTNING_SCHED_KEYS = ("interval", "frequency", "monitor")  # for Lightning's lr_scheduler config, not the schedule
MONITORABLE = ("val/loss", "val/acc", "train/loss", "train/acc")  # logged once per epoch: plateau can follow them
_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm, nn.LocalResponseNorm, nn.RMSNorm)
_GROUP_KEYS = ("lr_mult", "weight_decay")  # what optim.param_groups sets per glob

for _attr, _cls in sorted(vars(torch.optim).items()):  # every optimizer class of torch.optim, for `list`
    if isinstance(_cls, type) and issubclass(_cls, torch.optim.Optimizer) and _cls is not torch.optim.Optimizer:
        OPTIMIZERS.add(_attr.lower(), _cls, description=f"torch.optim.{_attr}")


def _target(cfg: Mapping[str, Any], section: str, module: str, registry: Any, kind: type | None) -> Any:
    """The callable ``cfg._target_`` names; the retired ``name`` key gets the ``_target_`` to write instead."""
    if "name" in cfg:
        obj = registry.get(str(cfg["name"]).lower(), path=f"{section}.name") if cfg["name"] is not None else None
        to = public_name(obj, module) if obj else "..."
        raise ConfigError(f"{section}.name", f"{section} is chosen by _target_ now, not by name",
                          hint=f"{section}._target_={to}, or a file of conf/{section}: {section}=NAME")
    return resolve_target(cfg.get("_target_"), section, module, map(registry.get, registry.names()), kind)


def _optimizer_options(optim_cfg: Mapping[str, Any]) -> tuple[Any, dict[str, Any], bool, dict[str, Any]]:
    """Check ``optim_cfg``; return (class, keyword arguments, no_decay_norm_bias, param_groups)."""
    # null means "the class's default": conf/optim lists keys as null so optim.lr=... needs no +.
    options = {k: v for k, v in optim_cfg.items() if v is not None}
    cls = _target(options, "optim", "torch.optim", OPTIMIZERS, torch.optim.Optimizer)
    options.pop("_target_")
    no_decay, groups = options.pop("no_decay_norm_bias", False), options.pop("param_groups", None) or {}
    check_type(no_decay, bool, "optim.no_decay_norm_bias")
    check_type(groups, dict[str, dict[str, float]], "optim.param_groups")
    for glob, settings in groups.items():
        for key, value in settings.items():
            if key not in _GROUP_KEYS:
                raise UnknownKeyError(f"optim.param_groups.{glob}.{key}", key, f"no setting {key!r}", _GROUP_KEYS)
            require_positive(value, f"optim.param_groups.{glob}.{key}") if key == "lr_mult" else None
    check_call(cls, options, "optim", f"optim {cls.__name__}", skip=("params",), verb="has")
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
    return cls, options, no_decay, groups


REST_GROUP = "other"  # the name of the group of parameters no glob of optim.param_groups chose
NO_DECAY_SUFFIX = "/no_decay"  # a group's norm-layer parameters and biases, with optim.no_decay_norm_bias


def param_groups(model: nn.Module, defaults: Mapping[str, Any], groups: Mapping[str, Mapping[str, float]] = {},
                 no_decay_norm_bias: bool = False) -> list[dict[str, Any]]:
    """The trainable parameters (frozen ones are left out) in torch's param groups: one per glob of
    ``groups`` (first match wins; ``lr_mult`` scales the lr), the rest in a last one; with
    ``no_decay_norm_bias``, each split again with norm-layer parameters and biases at weight decay 0.
    Where there are several, each group has a ``name`` (its glob, ``other``, ``.../no_decay``): Lightning's
    LearningRateMonitor logs them under it (``lr-Adam/encoder.*``), and the run's log line names them so."""
    no_decay = {id(p) for m in model.modules() for pname, p in m.named_parameters(recurse=False)
                if isinstance(m, _NORM_TYPES) or pname.endswith("bias")} if no_decay_norm_bias else set()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    chosen: dict[str, list[nn.Parameter]] = {glob: [] for glob in [*groups, ""]}
    for name, param in named:
        chosen[next((g for g in groups if fnmatch.fnmatchcase(name, g)), "")].append(param)
    rest = REST_GROUP if REST_GROUP not in groups else f"{REST_GROUP} (rest)"  # names must differ (LearningRateMonitor)
    built = []
    for glob, params in chosen.items():
        if glob and not params:
            _refuse_empty_group(model, glob, [n for n, _ in named])
        settings = dict(groups.get(glob, {}))
        mult = settings.pop("lr_mult", 1.0)  # kept in the group: a schedule re-planned on resume reads it
        group = {"lr": defaults["lr"] * mult, "lr_mult": mult, **settings} if glob else {}
        built += [{**group, "name": glob or rest, "params": [p for p in params if id(p) not in no_decay]},
                  {**group, "name": (glob or rest) + NO_DECAY_SUFFIX, "weight_decay": 0.0,
                   "params": [p for p in params if id(p) in no_decay]}]
    built = [g for g in built if g["params"]]
    if len(built) == 1:
        del built[0]["name"]  # one group: Lightning logs it as lr-Adam, as ever
    return built


def _refuse_empty_group(model: nn.Module, glob: str, trainable: list[str]) -> None:
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad and fnmatch.fnmatchcase(n, glob)]
    if frozen:
        raise ConfigError(f"optim.param_groups.{glob}", f"matches only frozen parameters ({len(frozen)} tensors: "
                          f"{', '.join(frozen[:3])}{', ...' if len(frozen) > 3 else ''}): freeze keeps them as they "
                          "are, so no optimizer group holds them",
                          hint=f"leave {glob} out of optim.param_groups, or out of freeze to train it at its lr_mult")
    raise ConfigError(f"optim.param_groups.{glob}", "matches no trainable parameter",
                      suggestions=closest_globs(glob, trainable),
                      hint="parameter names as in model.named_parameters(), e.g. encoder.0.*")


def describe_groups(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """For metrics.json and the log: each named param group's lr, lr_mult, weight decay and size
    ([] when the optimizer has one group, as without ``optim.param_groups`` and ``no_decay_norm_bias``)."""
    if len(optimizer.param_groups) < 2:
        return []
    return [{"name": g.get("name", f"pg{i}"), "lr": g["lr"], "lr_mult": g.get("lr_mult", 1.0),
             "weight_decay": g.get("weight_decay"), "tensors": len(g["params"]),
             "params": sum(p.numel() for p in g["params"])} for i, g in enumerate(optimizer.param_groups, 1)]


def group_line(groups: list[dict[str, Any]]) -> str | None:
    """One log line of :func:`describe_groups`' groups (None for one group)."""
    if not groups:
        return None
    parts = [f"{g['name']} lr {g['lr']:g}" + (f" (lr_mult {g['lr_mult']:g})" if g["lr_mult"] != 1 else "")
             + (f" weight_decay {g['weight_decay']:g}" if g.get("weight_decay") is not None else "")
             + f": {g['tensors']} tensors, {g['params']:,} params" for g in groups]
    return "optimizer groups: " + "; ".join(parts)


def build_optimizer(model: nn.Module, optim_cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    """The optimizer ``optim_cfg`` names, over the model's trainable parameters."""
    from hydra.utils import instantiate  # here: registering the optimizers' names (`list`) needs no Hydra

    cls, options, no_decay, groups = _optimizer_options(optim_cfg)
    spec = {"_target_": f"{cls.__module__}.{cls.__qualname__}", "_partial_": True, **options}
    built = param_groups(model, {**signature_defaults(cls), **options}, groups, no_decay)
    if not built:
        raise ConfigError("freeze", "every parameter of the model is frozen: nothing to train")
    return instantiate(spec, _convert_="all")(built)


# --- schedules -------------------------------------------------------------------------------

ONECYCLE_DIV, ONECYCLE_FINAL_DIV = 25.0, 1e4  # OneCycleLR's defaults: it starts at peak / 25, ends 1e4 lower still


def constant(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, last_step: int = -1) -> None:
    """Constant learning rate."""


def has_momentum(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` uses a momentum one-cycle can move: betas (Adam's family) or a momentum above 0
    (SGD, RMSprop). Cycling a momentum of 0 would give the optimizer one that its config left out."""
    return "betas" in optimizer.defaults or bool(optimizer.defaults.get("momentum"))


def onecycle(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, max_lr_factor: float = 1.0,
              pct_start: float = 0.25, cycle_momentum: bool | None = None,
              last_step: int = -1) -> _LR_SCHEDULER.LRScheduler:
    """One-cycle: warm up to lr * max_lr_factor (1: optim.lr is the peak), then anneal (OneCycleLR), every batch.
    The momentum (beta1) cycles inversely, 0.95 to 0.85 and back, where the optimizer has one (``cycle_momentum``
    null); Adagrad, Adadelta and the like keep theirs as they are."""
    require_positive(max_lr_factor, "sched.max_lr_factor")
    if not 0.0 < pct_start < 1.0:
        raise ConfigError("sched.pct_start", f"must be in (0, 1), got {pct_start}")
    if cycle_momentum is None:
        cycle_momentum = has_momentum(optimizer)
    elif cycle_momentum and not {"momentum", "betas"} & set(optimizer.defaults):
        raise ConfigError("sched.cycle_momentum", f"{type(optimizer).__name__} has no momentum or betas to cycle",
                          hint="sched.cycle_momentum=false, or null: cycled where the optimizer has a momentum")
    # OneCycleLR divides by zero when the warm-up phase is under two steps (tiny smoke runs):
    # plan at least that many; a run that stops earlier just never finishes the cycle.
    planned = max(total_steps, math.ceil(2 / pct_start) + 1)
    peaks = [lr * group.get("lr_mult", 1.0) * max_lr_factor for group in optimizer.param_groups]
    if last_step >= 0:  # re-planned on resume: OneCycleLR then reads its bounds from the groups (the old lr's)
        for group, peak in zip(optimizer.param_groups, peaks):
            group.update(max_lr=peak, initial_lr=peak / ONECYCLE_DIV, min_lr=peak / ONECYCLE_DIV / ONECYCLE_FINAL_DIV)
    return _LR_SCHEDULER.OneCycleLR(optimizer, max_lr=peaks, total_steps=planned, pct_start=pct_start,
                                    cycle_momentum=cycle_momentum, div_factor=ONECYCLE_DIV,
                                    final_div_factor=ONECYCLE_FINAL_DIV, last_epoch=last_step)


def cosine(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, min_lr: float = 0.0,
            last_step: int = -1) -> _LR_SCHEDULER.LRScheduler:
    """Cosine annealing from optim.lr to min_lr over the run (CosineAnnealingLR), every batch."""
    if min_lr < 0:
        raise ConfigError("sched.min_lr", f"must be >= 0, got {min_lr}")
    for group in optimizer.param_groups if last_step >= 0 else ():  # re-planned on resume: CosineAnnealingLR goes
        base = lr * group.get("lr_mult", 1.0)  # on from the group's lr (the old plan's), so it starts on this plan
        group["lr"] = min_lr + (base - min_lr) * (1 + math.cos(math.pi * (last_step + 1) / total_steps)) / 2
    return _LR_SCHEDULER.CosineAnnealingLR(optimizer, T_max=total_steps, eta_min=min_lr, last_epoch=last_step)


def warmup_cosine(optimizer: torch.optim.Optimizer, total_steps: int, lr: float, warmup_pct: float = 0.05,
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


SCHEDULERS.add("none", constant)
SCHEDULERS.add("onecycle", onecycle)
SCHEDULERS.add("cosine", cosine)
SCHEDULERS.add("warmup_cosine", warmup_cosine)
for _name, _cls in (("step", _LR_SCHEDULER.StepLR), ("multistep", _LR_SCHEDULER.MultiStepLR),
                    ("exponential", _LR_SCHEDULER.ExponentialLR), ("plateau", _LR_SCHEDULER.ReduceLROnPlateau)):
    SCHEDULERS.add(_name, _cls, description=f"torch.optim.lr_scheduler.{_cls.__name__}, stepped every epoch")


def _sched_options(sched_cfg: Mapping[str, Any] | None) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Check ``sched_cfg``; return (factory, its options, Lightning's lr_scheduler settings)."""
    options = {k: v for k, v in (sched_cfg or {}).items() if v is not None}
    factory = _target(options, "sched", "torch.optim.lr_scheduler", SCHEDULERS, None) if options.get("_target_") \
        else constant
    options.pop("_target_", None)
    what = f"sched {getattr(factory, '__name__', factory)}"
    lightning = {k: options.pop(k) for k in LIGHTNING_SCHED_KEYS if k in options}
    planned = not isinstance(factory, type)  # a factory of ours, planned over the run's total steps
    epochs = options.pop("epochs", None)  # modelforge's, not the factory's (module docstring)
    if epochs is not None:
        if not planned or factory is constant:
            raise ConfigError("sched.epochs", f"{what} is not planned over the run, so it spans no epochs",
                              allowed="sched.epochs with onecycle, cosine or warmup_cosine")
        if not fits(epochs, int, "sched.epochs") or epochs < 1:
            raise ConfigError("sched.epochs", f"got {epochs!r}", allowed="null (trainer.max_epochs) or an integer >= 1")
    # Arguments modelforge passes itself; Lightning restores a torch class's position (last_epoch) on resume.
    skip = ("optimizer", "total_steps", "lr", "last_step") if planned else ("optimizer", "last_epoch")
    check_call(factory, options, "sched", what, skip=skip, verb="has")
    interval = lightning.setdefault("interval", "step" if planned else "epoch")
    if interval not in ("step", "epoch"):
        raise UnknownNameError("interval", interval, ("step", "epoch"), path="sched.interval")
    if not planned and issubclass(factory, _LR_SCHEDULER.ReduceLROnPlateau):
        monitor = lightning.setdefault("monitor", "val/loss")
        if monitor not in MONITORABLE:
            raise UnknownNameError("metric", monitor, MONITORABLE, path="sched.monitor")
        options.setdefault("mode", "max" if monitor.endswith("acc") else "min")
    elif "monitor" in lightning:
        raise ConfigError("sched.monitor", f"only ReduceLROnPlateau (sched=plateau) follows a metric, not {what}")
    return factory, options, lightning


def lightning_settings(sched_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """Lightning's lr_scheduler settings of ``sched_cfg`` (interval, frequency, monitor), defaults filled in."""
    return _sched_options(sched_cfg)[2]


def validate_optim(optim_cfg: Mapping[str, Any], sched_cfg: Mapping[str, Any] | None,
                   model: nn.Module | None = None) -> type[torch.optim.Optimizer]:
    """Check both configs before any work starts, by building them over ``model`` (its param_groups'
    globs match its names), or without one over a throwaway parameter and no param_groups; the optimizer's class."""
    _optimizer_options(optim_cfg)
    _sched_options(sched_cfg)
    key = "optim"
    if model is None:  # 2-D: some optimizers (Muon) take matrices only
        model, optim_cfg = nn.Linear(2, 2, bias=False), {**optim_cfg, "param_groups": None}
    try:
        optimizer = build_optimizer(model, optim_cfg)
        key = "sched"
        build_scheduler(optimizer, sched_cfg, total_steps=100, lr=optimizer.defaults.get("lr", 1e-3))
        return type(optimizer)
    except ConfigError:
        raise
    except (ValueError, TypeError, RuntimeError) as exc:
        raise ConfigError(key, f"torch refused these options: {exc}",
                          hint="sched=none trains at a constant optim.lr with any optimizer" if key == "sched" else None
                          ) from None


@dataclass
class OptimPlan:
    """``optim`` and ``sched`` of a run config, checked when made by building both over ``model`` (its param_groups'
    globs match its names: :func:`validate_optim`). ``kind``: the optimizer class they build."""

    optim: dict[str, Any]
    sched: dict[str, Any] | None = None
    model: InitVar[nn.Module | None] = None
    kind: type[torch.optim.Optimizer] = field(init=False)

    def __post_init__(self, model: nn.Module | None) -> None:
        self.kind = validate_optim(self.optim, self.sched, model)


def build_scheduler(optimizer: torch.optim.Optimizer, sched_cfg: Mapping[str, Any] | None, total_steps: int,
                    lr: float, last_step: int = -1) -> Any:
    """The schedule; a planned one spans ``total_steps`` and ``last_step`` >= 0 continues it from there."""
    from hydra.utils import instantiate

    factory, options, _ = _sched_options(sched_cfg)
    make = instantiate({"_target_": f"{factory.__module__}.{factory.__qualname__}", "_partial_": True, **options},
                       _convert_="all")
    if isinstance(factory, type):
        return make(optimizer)
    if last_step >= 0:  # re-planned on resume: torch's schedules take their base lr from the groups (the old one's)
        for group in optimizer.param_groups:
            group["initial_lr"] = lr * group.get("lr_mult", 1.0)
    scheduler = make(optimizer, total_steps=total_steps, lr=lr, last_step=last_step)
    if scheduler is not None:
        # Saved with the scheduler's state, so a resumed run can tell it was planned for another length or lr.
        scheduler.planned_steps, scheduler.planned_lr = total_steps, lr
    return scheduler


def configure_optimizers(model: nn.Module, optim_cfg: Mapping[str, Any], sched_cfg: Mapping[str, Any] | None,
                         total_steps: int) -> Any:
    """What ``LightningModule.configure_optimizers`` returns: the optimizer, with Lightning's lr_scheduler dict."""
    optimizer = build_optimizer(model, optim_cfg)
    scheduler = build_scheduler(optimizer, sched_cfg, total_steps, optimizer.defaults["lr"])
    if scheduler is None:
        return optimizer
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, **_sched_options(sched_cfg)[2]}}
