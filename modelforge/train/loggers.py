"""The ``logger`` group: one or several Lightning loggers by name (``logger=[csv,tensorboard]``).

Names resolve through the LOGGERS registry; a logger whose package is not installed is refused
before any work with the package to install. Where they write is filled in by modelforge
(the run directory) unless the config says otherwise; how often they get step values is
Lightning's ``log_every_n_steps``, at most an epoch (:class:`StepLogInterval`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import Logger

from modelforge.errors import ConfigError
from modelforge.lazy import LazyClass, resolve_class
from modelforge.options import check_call, signature_defaults
from modelforge.registry import LOGGERS

# Lightning's interval for Trainer(log_every_n_steps=None), which conf/trainer/default.yaml spells out.
DEFAULT_LOG_EVERY_N_STEPS = 50


def _placement(name: str, run_dir: Path) -> dict[str, Any]:
    """Where a logger writes inside the run directory, as keyword arguments."""
    if name in ("csv", "tensorboard"):
        return {"save_dir": str(run_dir), "name": "logs", "version": ""}  # RUN/logs/
    if name == "mlflow":
        return {"tracking_uri": f"file:{run_dir / 'mlruns'}"}  # offline, inside the run
    return {"save_dir": str(run_dir)}


def logger_specs(logger_cfg: Any) -> dict[str, dict[str, Any]]:
    """``{name: options}`` from the ``logger`` config: null, ``{name: csv}`` (older runs) or ``{csv: {...}, ...}``."""
    if logger_cfg is None or logger_cfg is False:
        return {}
    if isinstance(logger_cfg, str):
        return {logger_cfg: {}}
    if not isinstance(logger_cfg, Mapping):
        raise ConfigError("logger", f"expected logger names, got {logger_cfg!r}", hint="logger=[csv,tensorboard]")
    if isinstance(logger_cfg.get("name"), str):
        options = dict(logger_cfg)
        return {options.pop("name"): options}
    return {name: dict(options or {}) for name, options in logger_cfg.items()}


def check_loggers(logger_cfg: Any, run_dir: Path = Path("RUN")) -> list[tuple[str, Any, dict[str, Any]]]:
    """Each logger's (name, factory, keyword arguments), checked: known name, package installed, options."""
    checked = []
    for name, options in logger_specs(logger_cfg).items():
        path = f"logger.{name}"
        factory = LOGGERS.get(name, path=path)
        missing = factory.missing_package() if isinstance(factory, LazyClass) else None
        if missing is not None:
            raise ConfigError(path, f"logger {name!r} needs the package {missing!r}, which is not installed",
                              hint=f"pip install {missing}")
        accepted = signature_defaults(resolve_class(factory))
        placed = {k: v for k, v in _placement(name, run_dir).items() if k in accepted and k not in options}
        check_call(factory, options, path, f"logger {name!r}", filled=placed)
        checked.append((name, factory, {**placed, **options}))
    return checked


def build_loggers(logger_cfg: Any, run_dir: Path) -> list[Logger]:
    """The loggers of ``logger_cfg``, writing under ``run_dir``; [] for none."""
    loggers = []
    for name, factory, kwargs in check_loggers(logger_cfg, run_dir):
        try:
            loggers.append(factory(**kwargs))
        except (ValueError, TypeError, ImportError, ModuleNotFoundError) as exc:
            raise ConfigError(f"logger.{name}", f"logger {name!r} refused its options: {exc}") from None
    return loggers


def step_log_interval(log_every_n_steps: int | None) -> list[Callback]:
    """:class:`StepLogInterval` where the interval is Lightning's default, not a user's choice: None,
    or the 50 it stands for (conf/trainer/default.yaml writes it out)."""
    return [StepLogInterval()] if log_every_n_steps in (None, DEFAULT_LOG_EVERY_N_STEPS) else []


class StepLogInterval(Callback):
    """Lightning's default ``log_every_n_steps``, shortened to an epoch where an epoch is shorter.

    With fewer batches per epoch than the interval (``trainer.limit_train_batches=5``, a small
    data set) the loggers would get no step values at all, and Lightning warns so. Lightning
    counts an epoch's batches (``fit_loop.setup_data``) where it checks them against the
    interval: the interval is 1 until then, so the check passes, and is set once they are counted.
    """

    def __init__(self) -> None:
        self.interval = DEFAULT_LOG_EVERY_N_STEPS

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self.interval = trainer.log_every_n_steps
            trainer.log_every_n_steps = 1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batches = trainer.num_training_batches
        fits = math.isfinite(batches) and batches > 0
        trainer.log_every_n_steps = min(self.interval, int(batches)) if fits else self.interval
