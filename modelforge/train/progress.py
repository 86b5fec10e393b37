"""Progress in every medium: a one-line bar in a terminal, plain log lines in a file or job log.

A Rich (or tqdm) bar redraws itself with escape codes: piped to a file it shows only its
last state. :func:`progress_bar` therefore picks a bar when stdout is a terminal and
:class:`LineProgress` otherwise, whose lines go through logging to stdout and ``train.log``.
Neither reads a metric (a host sync on a GPU) more than a few times a second.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks.progress import ProgressBar, TQDMProgressBar
from pytorch_lightning.utilities.data import extract_batch_size
from pytorch_lightning.utilities.imports import _RICH_AVAILABLE

from modelforge.train.module import fit_end_step

log = logging.getLogger(__name__)

# A bar shows the latest training loss: with a 12-column bar, the longest line
# ("epoch 1/1  [bar] 1719/1719 0:00:26 • 0:00:00 100.00it/s loss: 0.123") is 75 columns.
# Validation metrics get a log line at each epoch's end instead.
BAR_WIDTH = 12


class EpochLine:
    """The line at an epoch's end: its time and its figures, logged once they are all in.

    Lightning calls a callback's ``on_train_epoch_end`` before ``LightningModule.on_train_epoch_end``
    and before it reduces the epoch's logged values (``train/loss_epoch``): the line is noted
    there and logged by the next hook, the next epoch's start, the end of training or an exception.
    """

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._done: tuple[str, float] | None = None  # (epoch, seconds)

    def start(self) -> None:
        self._started = time.monotonic()

    def end(self, trainer: pl.Trainer) -> None:
        self._done = (_epoch(trainer), time.monotonic() - self._started)

    def log(self, trainer: pl.Trainer) -> None:
        if self._done is not None:
            epoch, seconds = self._done
            self._done = None
            log.info("%s done in %.2f s  %s", epoch, seconds, _epoch_metrics(trainer))


class _CompactMetrics:
    """Mixin for Lightning's bars: the step loss, read from the module at most every ``interval_s`` seconds.

    It reads ``ClassifierModule.last_step_loss`` rather than Lightning's progress-bar metrics, which
    Lightning converts to floats after every batch (a host sync per step on a GPU).
    """

    interval_s = 0.5
    needs_logged_step_loss = False  # ClassifierModule then logs the step loss for its logger only

    def _init_compact(self) -> None:
        self._shown: dict[str, float] = {}
        self._next_read = 0.0

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        now = time.monotonic()
        if now >= self._next_read:  # the bar asks every step; reading the tensor is a sync on a GPU
            self._next_read = now + self.interval_s
            loss = getattr(pl_module, "last_step_loss", None)
            self._shown = {"loss": float(loss)} if loss is not None else {}
        return dict(self._shown)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._next_read = 0.0  # the epoch's final figures, whenever the last read was
        super().on_train_epoch_end(trainer, pl_module)  # type: ignore[misc]

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._next_read = 0.0
        super().on_validation_end(trainer, pl_module)  # type: ignore[misc]


class CompactTQDMBar(_CompactMetrics, TQDMProgressBar):
    """Lightning's tqdm bar with the step loss, fitting an 80-column terminal."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._init_compact()


if _RICH_AVAILABLE:
    from pytorch_lightning.callbacks.progress import RichProgressBar

    class CompactRichBar(_CompactMetrics, RichProgressBar):
        """Lightning's Rich bar with the step loss and ``epoch N/M`` (1-based), in 80 columns."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._init_compact()
            self._epoch_line = EpochLine()

        def _get_train_description(self, current_epoch: int) -> str:
            return f"{_epoch(self.trainer):{len(self.validation_description)}}"

        def configure_columns(self, trainer: pl.Trainer) -> list:
            from pytorch_lightning.callbacks.progress.rich_progress import (
                CustomBarColumn,
            )

            columns = super().configure_columns(trainer)
            theme = self.theme
            columns[1] = CustomBarColumn(bar_width=BAR_WIDTH, complete_style=theme.progress_bar,
                                         finished_style=theme.progress_bar_finished,
                                         pulse_style=theme.progress_bar_pulse)
            return columns

        def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            super().on_train_start(trainer, pl_module)
            self._epoch_line.start()  # a run resumed mid-epoch starts without on_train_epoch_start

        def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self._epoch_line.log(trainer)  # the previous epoch's, above the bar
            super().on_train_epoch_start(trainer, pl_module)
            self._epoch_line.start()

        def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            super().on_train_epoch_end(trainer, pl_module)
            if self.is_enabled:
                self._epoch_line.end(trainer)

        def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self._epoch_line.log(trainer)  # while the bar is still drawn: the line goes above it

        def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
            self._epoch_line.log(trainer)
            super().on_exception(trainer, pl_module, exception)


class LineProgress(ProgressBar):
    """One log line every ``1/lines_per_epoch`` of an epoch and at least every ``every_s`` seconds.

    Each line has the epoch, the step, the latest loss, throughput and the time left;
    a line at each epoch's end has its validation metrics.
    """

    needs_logged_step_loss = False  # its loss is the training step's output

    def __init__(self, lines_per_epoch: int = 20, every_s: float = 30.0) -> None:
        super().__init__()
        self.lines_per_epoch = lines_per_epoch
        self.every_s = every_s
        self._enabled = True
        self._epoch_line = EpochLine()

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_start = self._last_line = time.monotonic()
        self._first_step = trainer.global_step
        self._samples = 0
        # A run resumed mid-epoch starts without on_train_epoch_start (Lightning skips it then).
        self._start_epoch()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_line.log(trainer)
        self._start_epoch()

    def _start_epoch(self) -> None:
        self._epoch_line.start()
        total = self.total_train_batches
        self._every = max(1, int(total) // self.lines_per_epoch) if math.isfinite(total) else 100

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if not self._enabled:
            return
        self._samples += extract_batch_size(batch)
        done = batch_idx + 1
        now = time.monotonic()
        if done % self._every and now - self._last_line < self.every_s:
            return
        if done == self.total_train_batches:
            return  # the epoch-end line follows
        self._last_line = now
        log.info(self._line(trainer, outputs, done, now))

    def _line(self, trainer: pl.Trainer, outputs: Any, done: int, now: float) -> str:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        elapsed = max(now - self._fit_start, 1e-9)
        steps = trainer.global_step - self._first_step
        total = self.total_train_batches
        parts = [_epoch(trainer),
                 f"step {done}/{total}" if math.isfinite(total) else f"step {done}",
                 f"loss {float(loss):.4f}" if loss is not None else "",
                 f"{steps / elapsed:.1f} it/s ({self._samples / elapsed:,.0f} samples/s)"]
        left = max(fit_end_step(trainer) - trainer.global_step, 0)
        if steps and math.isfinite(left):
            parts.append(f"eta {_clock(left * elapsed / steps)}")
        return "  ".join(p for p in parts if p)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._enabled:
            self._epoch_line.end(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_line.log(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._epoch_line.log(trainer)

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._enabled:
            log.info("testing: %s batches", sum(trainer.num_test_batches))


def _epoch(trainer: pl.Trainer) -> str:
    last = trainer.max_epochs
    return f"epoch {trainer.current_epoch + 1}" + (f"/{last}" if last is not None and last > 0 else "")


def _epoch_metrics(trainer: pl.Trainer) -> str:
    metrics = trainer.callback_metrics
    return "  ".join(f"{k} {float(metrics[k]):.4f}" for k in ("train/loss_epoch", "val/loss", "val/acc")
                     if k in metrics)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def progress_bar(stream: Any = None) -> ProgressBar:
    """A bar for a terminal, plain lines for anything else (a file, a pipe, a cluster job's log)."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        return LineProgress()
    return CompactRichBar() if _RICH_AVAILABLE else CompactTQDMBar()
