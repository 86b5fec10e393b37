"""Stop training at the first step whose loss is not finite, or above ``divergence.max_loss``.

The check runs before backward, so the weights are still those of the last good step and
no optimizer step is taken on a NaN. ``trainer.detect_anomaly=true`` (Lightning's option)
additionally makes autograd name the operation that produced the first NaN gradient, at a
large cost in speed: for finding the cause, not for every run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from torch import Tensor

from modelforge.stops import Diverged


class DivergenceGuard(Callback):
    """Raises :class:`Diverged` naming the step, the loss and the likely causes."""

    def __init__(self, max_loss: float | None = None, config: Mapping[str, Any] | None = None) -> None:
        self.max_loss = None if max_loss is None else float(max_loss)
        self.config = dict(config or {})

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        value = float(loss.detach().float().item())
        bad = not math.isfinite(value)
        if not bad and (self.max_loss is None or value <= self.max_loss):
            return
        what = f"loss {value}" if bad else f"loss {value:.4g} above divergence.max_loss={self.max_loss:g}"
        raise Diverged(f"training diverged at step {trainer.global_step} (epoch {trainer.current_epoch}): "
                       f"{what}. {self._causes(trainer)}")

    def _causes(self, trainer: pl.Trainer) -> str:
        optim = self.config.get("optim") or {}
        causes = [f"a learning rate too high (optim.lr={optim.get('lr')}, optim={optim.get('name')}): try 10x lower"]
        precision = str(trainer.precision)
        if precision.startswith("16"):
            causes.append(f"float16 overflow (trainer.precision={precision}): try bf16-mixed or 32-true")
        else:
            causes.append(f"numeric precision (trainer.precision={precision})")
        causes.append("no gradient clipping (trainer.gradient_clip_val=1.0)")
        return ("Likely causes: " + "; ".join(causes) +
                ". trainer.detect_anomaly=true names the operation that first produced a NaN.")
