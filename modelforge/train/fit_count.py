"""How a modelforge fit counts its epochs and steps for the progress lines: ``callbacks=[swa]``'s batch-norm pass is
no epoch of training, and a resumed run ends at the step it plans for, not at Lightning's estimate."""

from __future__ import annotations

import pytorch_lightning as pl

from modelforge.report.progress import FitCount
from modelforge.train.averaging import in_batch_norm_pass, training_epochs
from modelforge.train.module import fit_end_step


class RunFitCount(FitCount):
    """The counts of :mod:`modelforge.train.averaging` and :func:`~modelforge.train.module.fit_end_step`."""

    def epochs(self, trainer: pl.Trainer) -> int | None:
        return training_epochs(trainer)

    def extra_pass(self, trainer: pl.Trainer) -> str | None:
        return "swa batch-norm pass" if in_batch_norm_pass(trainer) else None

    def end_step(self, trainer: pl.Trainer) -> int:
        return fit_end_step(trainer)
