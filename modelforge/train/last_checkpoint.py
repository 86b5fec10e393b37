"""``last.ckpt``: the weights of the end of every epoch, and of the end of training.

Lightning 2.6's ``ModelCheckpoint(save_last=True)`` rewrites ``last.ckpt`` only in an epoch
that also saved a new best checkpoint (and at the end of training only if it never wrote one),
so ``last.ckpt`` lagged behind the final weights whenever ``val/acc`` stopped improving. Here
it is a checkpoint callback of its own: no monitor, one file, replaced every epoch.
"""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.trainer.states import TrainerFn

LAST_CKPT = "last.ckpt"


class LastCheckpoint(ModelCheckpoint):
    """Keeps ``DIR/last.ckpt`` current: after every epoch, and when fit ends (``fast_dev_run`` included)."""

    def __init__(self, dirpath: str | Path) -> None:
        super().__init__(dirpath=dirpath, filename=Path(LAST_CKPT).stem, monitor=None, save_top_k=1,
                         enable_version_counter=False)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if trainer.state.fn == TrainerFn.FITTING and self._last_global_step_saved != trainer.global_step:
            trainer.save_checkpoint(Path(self.dirpath) / LAST_CKPT, weights_only=False)  # a resume point: the full state
            self._last_global_step_saved = trainer.global_step
