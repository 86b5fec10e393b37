"""The ``callbacks`` and ``logger`` groups: ``{_target_: CLASS, **arguments}`` built by ``hydra.utils.instantiate``.

A target must be a Lightning callback or logger, or a class registered in CALLBACKS or LOGGERS (an entry
without ``_target_`` names one: ``+callbacks.mine.n=1``); nothing else is imported. Arguments are checked
against the class's signature first, for did-you-mean messages that ``instantiate``'s TypeError cannot give.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from pytorch_lightning.callbacks import Callback, EarlyStopping, Timer
from pytorch_lightning.loggers import Logger

from modelforge.config import check_call, resolve_target, signature_defaults
from modelforge.errors import ConfigError
from modelforge.registry import CALLBACKS, LOGGERS
from modelforge.tasks import metric_mode
from modelforge.train.averaging import averaging_callbacks

log = logging.getLogger("modelforge.train")

# The modules a config's _target_ may name, besides classes registered by plugins.
ALLOWED_MODULES = {"callbacks": "pytorch_lightning.callbacks", "logger": "pytorch_lightning.loggers"}
_GROUPS = {"callbacks": (CALLBACKS, Callback), "logger": (LOGGERS, Logger)}  # registry, base class
# Lightning loggers whose packages are optional extras.
_LOGGER_PACKAGES = {"TensorBoardLogger": ("tensorboard", "tensorboardX"), "MLFlowLogger": ("mlflow",),
                    "WandbLogger": ("wandb",), "CometLogger": ("comet_ml",)}
# Lightning's interval for Trainer(log_every_n_steps=None), which conf/trainer/default.yaml spells out.
DEFAULT_LOG_EVERY_N_STEPS = 50


def checked_specs(group: str, cfg: Any, fill: Callable[..., dict]) -> list[tuple[str, dict[str, Any]]]:
    """``[(name, {_target_, **arguments})]``, checked; ``fill`` adds what modelforge sets unless the config does."""
    if cfg and not isinstance(cfg, Mapping):
        raise ConfigError(group, f"expected a mapping of names to options, got {cfg!r}",
                          hint=f"{group}=[a,b] {group}.a.option=value")
    registry, kind = _GROUPS[group]
    specs = []
    for name, options in (cfg or {}).items():
        options, path = dict(options or {}), f"{group}.{name}"
        target = options.pop("_target_", None)  # None: the class registered as `name`; either only if allowed
        cls = (registry.get(name, path=path) if target is None
               else resolve_target(target, path, ALLOWED_MODULES[group], map(registry.get, registry.names()), kind))
        accepted = signature_defaults(cls)
        placed = {k: v for k, v in fill(cls, accepted, options).items() if k in accepted and k not in options}
        check_call(cls, options, path, f"{group} {name!r}", filled=placed)
        specs.append((name, {"_target_": f"{cls.__module__}.{cls.__qualname__}", **placed, **options}))
    return specs


def _instantiate(group: str, name: str, spec: dict[str, Any]) -> Any:
    try:
        built = instantiate(spec, _convert_="all")
    except InstantiationException as exc:  # the class refused its arguments, or a package is missing
        cause = exc.__cause__ or exc
        raise ConfigError(f"{group}.{name}", f"{name!r} refused its options: {cause}",
                          hint="pip install the package it names" if isinstance(cause, ImportError) else None) from None
    if not isinstance(built, kind := _GROUPS[group][1]):  # a registered factory's product
        raise ConfigError(f"{group}.{name}", f"{type(built).__name__} is not a Lightning {kind.__name__}")
    return built


def build_callbacks(cfg: Any, monitor: str = "val/acc") -> list[Callback]:
    """The chosen callbacks, in order; a monitoring one watches the run's ``monitor`` with its mode."""

    def fill(cls: type, accepted: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
        if accepted.get("monitor") is None:  # no monitor, or an optional one (ModelCheckpoint)
            return {}
        return {"monitor": monitor, "mode": metric_mode(str(options.get("monitor", monitor)))}

    built = [_instantiate("callbacks", name, spec) for name, spec in checked_specs("callbacks", cfg, fill)]
    if any(isinstance(c, (EarlyStopping, Timer)) for c in built):
        built.append(EarlyStopReport())
    return built


def check_loggers(cfg: Any, run_dir: Path = Path("RUN")) -> list[tuple[str, dict[str, Any]]]:
    """The loggers' specs, checked against their signatures (built only in the run)."""

    def fill(cls: type, accepted: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
        if cls.__name__ in ("CSVLogger", "TensorBoardLogger"):
            return {"save_dir": str(run_dir), "name": "logs", "version": ""}  # RUN/logs/
        if cls.__name__ == "MLFlowLogger":
            return {"tracking_uri": f"file:{run_dir / 'mlruns'}"}  # offline, inside the run
        return {"save_dir": str(run_dir)}

    specs = checked_specs("logger", cfg, fill)
    for name, spec in specs:  # before the run starts: these classes import their package only when built
        packages = _LOGGER_PACKAGES.get(spec["_target_"].rpartition(".")[2], ())
        if packages and not any(importlib.util.find_spec(p) for p in packages):
            raise ConfigError(f"logger.{name}", f"logger {name!r} needs the package {packages[0]!r}, which is not "
                              "installed", hint=f"pip install {packages[0]}")
    return specs


@dataclass
class CallbacksPlan:
    """The ``callbacks`` and ``logger`` groups of a run config, checked when made (names, installed packages,
    arguments against their classes' signatures; each callback built once and thrown away, as Lightning callbacks
    check their own arguments). ``loggers``: ``(name, {_target_, **arguments})`` each; ``averaging``: ``(name, EMA or
    SWA)`` of each weight-averaging callback."""

    callbacks: InitVar[Any]
    logger: InitVar[Any]
    monitor: str = "val/acc"
    loggers: list[tuple[str, dict[str, Any]]] = field(init=False)
    averaging: list[tuple[str, str]] = field(init=False)

    def __post_init__(self, callbacks: Any, logger: Any) -> None:
        self.loggers = check_loggers(logger)  # before the run dir exists
        build_callbacks(callbacks, self.monitor)
        self.averaging = averaging_callbacks(callbacks)


def build_loggers(cfg: Any, run_dir: Path) -> list[Logger]:
    """The chosen loggers, writing under ``run_dir``; [] for none."""
    return [_instantiate("logger", name, spec) for name, spec in check_loggers(cfg, run_dir)]


class EarlyStopReport(Callback):
    """Says in the console and train.log when early stopping or the timer ended the run, and at which epoch."""

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        report = early_stop_summary(trainer)
        if report and trainer.is_global_zero:
            log.info("%s: stopped after epoch %d of at most %s: %s", report["stopped_by"],
                     report["stopped_early_epoch"], trainer.max_epochs, report["stopped_early_reason"])


def early_stop_summary(trainer: pl.Trainer) -> dict[str, Any]:
    """For metrics.json: the epoch (1-based) at which early stopping or the timer ended the run, and why."""
    for callback in trainer.early_stopping_callbacks:
        if callback.stopped_epoch > 0 or trainer.should_stop and callback.stopping_reason_message:
            return {"stopped_by": "early stopping", "stopped_early_epoch": callback.stopped_epoch + 1,
                    "stopped_early_reason": " ".join((callback.stopping_reason_message or "").split())
                    .removesuffix(" Signaling Trainer to stop.")}  # Lightning's words to itself
    for callback in trainer.callbacks:
        remaining = callback.time_remaining() if isinstance(callback, Timer) else None
        if remaining is not None and remaining <= 0:
            elapsed = timedelta(seconds=int(callback.time_elapsed()))
            return {"stopped_by": "timer", "stopped_early_epoch": max(trainer.current_epoch, 1),
                    "stopped_early_reason": f"time limit reached after {elapsed} of training"}
    return {}


class StepLogInterval(Callback):
    """Lightning's default ``log_every_n_steps``, shortened to an epoch where an epoch is shorter (else loggers
    get no step values and Lightning warns). Lightning checks it before counting batches: 1 until then passes."""

    interval = DEFAULT_LOG_EVERY_N_STEPS

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self.interval = trainer.log_every_n_steps
            trainer.log_every_n_steps = 1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batches = trainer.num_training_batches
        fits = math.isfinite(batches) and batches > 0
        trainer.log_every_n_steps = min(self.interval, int(batches)) if fits else self.interval
