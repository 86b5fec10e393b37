"""Keeping the training state when fit stops on an exception, Ctrl-C included."""

from __future__ import annotations

import logging
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.trainer.states import TrainerFn

from modelforge.resources import is_allocation_failure
from modelforge.stops import Diverged

log = logging.getLogger(__name__)

INTERRUPTED_CKPT = "interrupted.ckpt"


class CheckpointOnException(Callback):
    """Saves weights, optimizer and loop state to ``path`` when fitting stops on an exception.

    Lightning's ``OnExceptionCheckpoint`` saves the same file, but once installed it turns
    every ``fit(ckpt_path=None)`` into ``fit(ckpt_path="last")``: a run would silently resume
    from whatever checkpoint it finds. modelforge resumes only when asked (``ckpt_path=``).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return  # testing changes no weights: the fit's checkpoints hold them
        if isinstance(exception, Diverged) or is_allocation_failure(exception):
            return  # resuming would diverge again / run out of memory again: offer no resume point
        try:
            trainer.save_checkpoint(self.path, weights_only=False)  # a resume point: the full state
        except Diverged as exc:  # a loss checked late (on a GPU) was bad: those weights are not worth resuming
            log.error("not saving the training state to %s: %s", self.path, exc)
            return
        except Exception as exc:  # e.g. a full disk: the run's own error is the one to report
            log.error("could not save the training state to %s: %s", self.path, exc)
            return
        log.info("saved the training state at step %d to %s", trainer.global_step, self.path)
