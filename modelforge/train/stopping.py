"""Why a run stopped early: stop signals (SIGTERM, SIGUSR1) and the divergence guard (exit codes: modelforge.errors)."""

from __future__ import annotations

import math
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities.exceptions import SIGTERMException
from torch import Tensor

from modelforge.errors import (
    ConfigError,
    Diverged,
    Interrupted,
    RunStopped,
    Terminated,
    allocation_error,
    is_allocation_failure,
)


@dataclass
class ReceivedSignal:
    """The first stop signal this run got (None: none)."""

    signum: int | None = None


@contextmanager
def stop_signals() -> Iterator[ReceivedSignal]:
    """Handle SIGTERM/SIGUSR1 for the duration of a run; yields what was received."""
    received = ReceivedSignal()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if received.signum is None:
            received.signum = signum
        if signum != signal.SIGTERM:
            signal.raise_signal(signal.SIGTERM)  # SIGUSR1 stops the run as SIGTERM does
        # While Lightning's loops run, its own handler (installed over this one, and calling
        # it) makes the loop stop at the end of the batch; outside them, stop here.
        elif signal.getsignal(signal.SIGTERM) is on_signal:
            raise Terminated(received.signum)

    signums = [signal.SIGTERM] + ([] if "SLURM_JOB_ID" in os.environ else [signal.SIGUSR1])
    if threading.current_thread() is not threading.main_thread():
        signums = []  # only the main thread may set handlers (e.g. a run inside a joblib thread)
    saved = {s: signal.signal(s, on_signal) for s in signums}
    try:
        yield received
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


class DivergenceGuard(Callback):
    """Raises :class:`Diverged` naming the step, the loss and the likely causes (from the run ``config``).

    A finite loss above ``max_loss`` also stops the run (None: only NaN and inf do). ``deferred`` checks each
    loss at the next step instead of at once, so the GPU never waits for it (None: on a single CUDA GPU only)."""

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
            return self.raise_if_bad(float(value.item()), trainer, trainer.global_step, trainer.current_epoch)
        self.check_pending(trainer)  # the previous step's loss: its copy is done unless the GPU lags a step
        done = None
        if value.is_cuda:
            value, done = value.to("cpu", non_blocking=True), torch.cuda.Event()
            done.record()
        self._pending = (value if done is not None else value.clone(), done, trainer.global_step, trainer.current_epoch)

    def check_pending(self, trainer: pl.Trainer, *_: Any) -> None:
        if self._pending is None:
            return
        value, done, step, epoch = self._pending
        self._pending = None
        if done is not None:
            done.synchronize()
        self.raise_if_bad(float(value), trainer, step, epoch)

    # Before anything that would keep or judge the weights a bad step left behind.
    on_validation_start = on_save_checkpoint = on_train_end = check_pending

    def raise_if_bad(self, value: float, trainer: pl.Trainer, step: int, epoch: int) -> None:
        bad = not math.isfinite(value)
        if not bad and (self.max_loss is None or value <= self.max_loss):
            return
        what = f"loss {value}" if bad else f"loss {value:.4g} above divergence.max_loss={self.max_loss:g}"
        optim, precision = self.config.get("optim") or {}, str(trainer.precision)
        precision_cause = (f"float16 overflow (trainer.precision={precision}): try bf16-mixed or 32-true"
                           if precision.startswith("16") else f"numeric precision (trainer.precision={precision})")
        raise Diverged(f"training diverged at step {step} (epoch {epoch}): {what}. Likely causes: a learning rate "
                       f"too high (optim.lr={optim.get('lr')}, optim={optim.get('_target_')}): try 10x lower; "
                       f"{precision_cause}; no gradient clipping (trainer.gradient_clip_val=1.0). "
                       "trainer.detect_anomaly=true names the operation that first produced a NaN.")


def _unscaled(trainer: pl.Trainer, loss: Tensor) -> Tensor:
    """The loss itself: under ``16-mixed`` with a gradient scaler, callbacks get it times the scale (65536 at first)."""
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    if scaler is None or not scaler.is_enabled():
        return loss
    # The scale as a tensor on the loss's device: get_scale() would read it back to the host.
    return loss / (scaler._get_scale_async() if hasattr(scaler, "_get_scale_async") else scaler.get_scale())


def stop_reason(exc: BaseException, trainer: pl.Trainer, received: ReceivedSignal,
                model_cfg: Mapping[str, Any] | None) -> BaseException:
    """The exception that says why the run stopped: ``exc`` itself, or a clearer one in its place.

    Lightning ends a run stopped by SIGTERM with ``SIGTERMException`` (a SystemExit with status 0) and one
    stopped by Ctrl-C with ``sys.exit(1)``; both become :class:`RunStopped` here."""
    if isinstance(exc, RunStopped):
        return exc
    if isinstance(exc, SIGTERMException) or (received.signum is not None and isinstance(exc, SystemExit)):
        return Terminated(received.signum or signal.SIGTERM)
    if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit) and trainer.interrupted):
        return Interrupted()
    if is_allocation_failure(exc):
        return allocation_error(exc, model_cfg, "while training")
    return exc


@dataclass(frozen=True)
class Divergence:
    """``divergence.*`` of a run config (typed by TrainConfig), checked when made: ``max_loss`` None or > 0."""

    max_loss: float | None = None

    def __post_init__(self) -> None:
        if self.max_loss is not None and self.max_loss <= 0:
            raise ConfigError("divergence.max_loss", f"got {self.max_loss!r}", allowed="null or a number > 0")


def divergence_bound(config: Mapping[str, Any]) -> float | None:
    """``divergence.max_loss`` of a typed run config (a stored one: a checkpoint's), checked: None or > 0."""
    return Divergence((config.get("divergence") or {}).get("max_loss")).max_loss
