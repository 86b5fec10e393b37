"""Pruning an Optuna trial from inside its run: a Lightning callback, and what ``metrics.json`` says of a pruned run.

Optuna's own ``PyTorchLightningPruningCallback`` (optuna-integration) is written for the ``lightning`` package, whose
callbacks a ``pytorch_lightning.Trainer`` refuses, and raises ``TrialPruned`` inside ``fit``, which would end the
run as a crash. This one stops training as early stopping does: the epoch ends, ``last.ckpt`` is written, and the
run's records say ``status: pruned``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback

from modelforge.sweep.trial import trial_is_on, trial_of_job

log = logging.getLogger(__name__)


class TrialPruning(Callback):
    """Reports ``monitor`` to ``trial`` after each validation (step = validations so far: the epoch, with one
    validation an epoch) and stops training when the study's pruner says so.

    ``trial`` is None in the DDP ranks that Lightning started in processes of their own: they follow rank 0.
    """

    def __init__(self, trial: Any | None, monitor: str) -> None:
        self.trial, self.monitor = trial, monitor
        self.validations = 0
        self.pruned: dict[str, Any] | None = None  # when, and at which value, the pruner stopped the run

    def run_record(self) -> dict[str, Any]:
        """For ``metrics.json`` of a run its trial's pruner stopped: ``status: pruned``, when and why; else {}.
        (``train()`` asks its callbacks for this, and tests no weights of a pruned run.)"""
        if self.pruned is None:
            return {}
        return {"status": "pruned", "stopped_by": "pruner", "stopped_early_epoch": self.pruned["epoch"],
                "stopped_early_reason": f"the Optuna study's pruner stopped the trial after validation "
                                        f"{self.pruned['step']}: {self.monitor} {self.pruned['value']:.4f}"}

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.validations += 1
        value = trainer.callback_metrics.get(self.monitor)
        value = float(value) if value is not None else math.nan
        prune = False
        if self.trial is not None and math.isfinite(value):  # a NaN is the divergence guard's to report
            prune = self._report(value)
        if trainer.world_size > 1:
            prune = trainer.strategy.broadcast(prune, src=0)
        if prune and self.pruned is None:
            trainer.should_stop = True
            self.pruned = {"epoch": trainer.current_epoch + 1, "step": self.validations, "value": value}
            if self.trial is not None:
                log.info("trial %d pruned after validation %d (epoch %d): %s %.4f", self.trial.number,
                         self.validations, trainer.current_epoch + 1, self.monitor, value)


    def _report(self, value: float) -> bool:
        """Report ``value``; whether the pruner stops the trial. A trial that another worker of its study failed (this
        one's heartbeat went silent past the grace period) takes no more reports: the run goes on unreported."""
        from optuna.exceptions import UpdateFinishedTrialError  # loaded: the trial is Optuna's

        try:
            self.trial.report(value, step=self.validations)
            return self.trial.should_prune()
        except UpdateFinishedTrialError:
            log.warning("trial %d was failed by another worker of the study: this run goes on unreported",
                        self.trial.number)
            self.trial = None
            return False


def trial_callbacks(monitor: str, job: int | None = None) -> list[Callback]:
    """The pruning callback in a job of an Optuna trial that runs in the sweep's process (it reports even when
    the study has no pruner: optuna-dashboard shows the curves, a later pruned search compares with them).
    ``job``: the sweep's job number, which the CLI reads from Hydra (None outside a sweep)."""
    return [TrialPruning(trial_of_job(job), monitor)] if trial_is_on() else []


