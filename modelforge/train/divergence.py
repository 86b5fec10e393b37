"""Stop training at the first step whose loss is not finite, or above ``divergence.max_loss``.

On the CPU (and under DDP) the check runs before backward, so the weights are still those of the
last good step and no optimizer step is taken on a NaN. On a single CUDA GPU, reading the loss
back before backward would make the host wait for the GPU to finish each step before it can
queue the next; there each step's loss is copied back without waiting and checked at the next
step, so the run stops one step later and the host runs at most one step ahead. A pending check
also runs before validation, before each full checkpoint save and at the end of training, so
modelforge's checkpoints never hold weights past a bad loss (a weights-only save skips callbacks'
hooks). Under DDP each rank sees only its own loss, and a bad one reaches every rank's weights
through the gradient all-reduce: that is why DDP keeps the immediate check.
``trainer.detect_anomaly=true`` (Lightning's option) additionally makes autograd name the
operation that produced the first NaN gradient, at a large cost in speed: for finding the cause,
not for every run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from torch import Tensor

from modelforge.stops import Diverged


class DivergenceGuard(Callback):
    """Raises :class:`Diverged` naming the step, the loss and the likely causes.

    Args:
        max_loss: a finite loss above this also stops the run (None: only NaN and inf do).
        config: the run config, to name the likely causes.
        deferred: check each loss at the next step instead of at once; None: on a single CUDA GPU only.
    """

    def __init__(self, max_loss: float | None = None, config: Mapping[str, Any] | None = None,
                 deferred: bool | None = None) -> None:
        self.max_loss = None if max_loss is None else float(max_loss)
        self.config = dict(config or {})
        self.deferred = deferred
        self._deferred = False  # this fit's choice (on_train_start)
        # (the loss on the host, the event that says its copy is done, step, epoch)
        self._pending: tuple[Tensor, torch.cuda.Event | None, int, int] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        single_gpu = pl_module.device.type == "cuda" and trainer.world_size == 1
        self._deferred = single_gpu if self.deferred is None else self.deferred
        self._pending = None

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        value = _unscaled(trainer, loss.detach().float())
        if not self._deferred:
            self._check(float(value.item()), trainer, trainer.global_step, trainer.current_epoch)
            return
        self._check_pending(trainer)  # the previous step's loss: its copy is done unless the GPU lags a step
        done = None
        if value.is_cuda:
            value = value.to("cpu", non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        else:
            value = value.clone()
        self._pending = (value, done, trainer.global_step, trainer.current_epoch)

    # Before anything that would keep or judge the weights a bad step left behind.
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check_pending(trainer)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._check_pending(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check_pending(trainer)

    def _check_pending(self, trainer: pl.Trainer) -> None:
        if self._pending is None:
            return
        value, done, step, epoch = self._pending
        self._pending = None
        if done is not None:
            done.synchronize()
        self._check(float(value), trainer, step, epoch)

    def _check(self, value: float, trainer: pl.Trainer, step: int, epoch: int) -> None:
        bad = not math.isfinite(value)
        if not bad and (self.max_loss is None or value <= self.max_loss):
            return
        what = f"loss {value}" if bad else f"loss {value:.4g} above divergence.max_loss={self.max_loss:g}"
        raise Diverged(f"training diverged at step {step} (epoch {epoch}): {what}. {self._causes(trainer)}")

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


def _unscaled(trainer: pl.Trainer, loss: Tensor) -> Tensor:
    """The loss itself: under ``16-mixed`` with a gradient scaler, Lightning hands callbacks the loss
    already multiplied by the scale (65536 at first), which ``max_loss`` must not be compared with."""
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    if scaler is None or not scaler.is_enabled():
        return loss
    # The scale as a tensor on the loss's device: get_scale() would read it back to the host.
    scale = scaler._get_scale_async() if hasattr(scaler, "_get_scale_async") else scaler.get_scale()
    return loss / scale
