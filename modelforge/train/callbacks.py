"""The ``callbacks`` group: Lightning callbacks chosen by name, each configured by its own arguments.

``callbacks=[early_stopping,lr_monitor] callbacks.early_stopping.patience=1`` composes to
``{early_stopping: {patience: 1, ...}, lr_monitor: {...}}``; each name resolves through the
CALLBACKS registry (built-ins in ``modelforge.builtin_names``, a user's own through
``CALLBACKS.register``) and its options are checked against the class's signature.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback, EarlyStopping, Timer
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from modelforge.errors import ConfigError
from modelforge.lazy import resolve_class
from modelforge.options import check_call, signature_defaults
from modelforge.registry import CALLBACKS

log = logging.getLogger("modelforge.train")


def build_callbacks(callbacks_cfg: Mapping[str, Any] | None, monitor: str = "val/acc") -> list[Callback]:
    """The callbacks of ``callbacks_cfg``, in order; a monitored one's ``mode`` follows its metric."""
    if not callbacks_cfg:
        return []
    if not isinstance(callbacks_cfg, Mapping):
        raise ConfigError("callbacks", f"expected a mapping of callback names to options, got {callbacks_cfg!r}",
                          hint="callbacks=[early_stopping,lr_monitor] callbacks.early_stopping.patience=2")
    built: list[Callback] = []
    for name, options in callbacks_cfg.items():
        path = f"callbacks.{name}"
        factory = CALLBACKS.get(name, path=path)
        options = dict(options or {})
        accepted = signature_defaults(resolve_class(factory))
        if "monitor" in accepted and accepted["monitor"] is not None and "monitor" not in options:
            options["monitor"] = monitor  # required by EarlyStopping: the run's monitor by default
        if "mode" in accepted and "mode" not in options and isinstance(options.get("monitor"), str):
            options["mode"] = "min" if options["monitor"].endswith("loss") else "max"
        check_call(factory, options, path, f"callback {name!r}")
        try:
            callback = factory(**options)
        except (MisconfigurationException, ValueError, TypeError) as exc:
            raise ConfigError(path, f"callback {name!r} refused its options: {exc}") from None
        if not isinstance(callback, Callback):
            raise ConfigError(path, f"{type(callback).__name__} is not a Lightning Callback")
        built.append(callback)
    if any(isinstance(c, (EarlyStopping, Timer)) for c in built):
        built.append(EarlyStopReport())
    return built


class EarlyStopReport(Callback):
    """Says in the console and train.log when early stopping or the timer ended the run, and at which epoch.

    (Lightning's own notices of it are held back with its other rank-zero notices: conf/hydra/job_logging/run.yaml.)
    """

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        report = early_stop_summary(trainer)
        if report and trainer.is_global_zero:
            log.info("%s: stopped after epoch %d of at most %s: %s", report["stopped_by"],
                     report["stopped_early_epoch"], trainer.max_epochs, report["stopped_early_reason"])


def early_stop_summary(trainer: pl.Trainer) -> dict[str, Any]:
    """For metrics.json: the epoch (1-based) at which early stopping or the timer ended the run, and why;
    {} if neither did."""
    for callback in trainer.early_stopping_callbacks:
        if callback.stopped_epoch > 0 or trainer.should_stop and callback.stopping_reason_message:
            return {"stopped_by": "early stopping", "stopped_early_epoch": callback.stopped_epoch + 1,
                    "stopped_early_reason": " ".join((callback.stopping_reason_message or "").split())}
    for callback in trainer.callbacks:
        remaining = callback.time_remaining() if isinstance(callback, Timer) else None
        if remaining is not None and remaining <= 0:
            elapsed = timedelta(seconds=int(callback.time_elapsed()))
            return {"stopped_by": "timer", "stopped_early_epoch": max(trainer.current_epoch, 1),
                    "stopped_early_reason": f"time limit reached after {elapsed} of training"}
    return {}
