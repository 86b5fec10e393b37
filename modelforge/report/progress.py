"""Progress: Lightning's Rich bar in a terminal; elsewhere (a file keeps a bar's redrawing as
garbage), :class:`LineProgress`'s log lines. Both log a line at each epoch's end. How a fit counts its epochs and
steps is a :class:`FitCount`: Lightning's own here; a modelforge run passes its own (``train.fit_count``)."""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
import time
from datetime import timedelta
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ProgressBar, RichProgressBar
from pytorch_lightning.utilities.data import extract_batch_size

log = logging.getLogger(__name__)


class FitCount:
    """The epochs and steps of a fit, as the progress lines count them: Lightning's figures."""

    def epochs(self, trainer: pl.Trainer) -> int | None:
        """The epochs the fit trains (None, -1: no limit)."""
        return trainer.max_epochs

    def extra_pass(self, trainer: pl.Trainer) -> str | None:
        """The name of the pass this epoch is when it is no epoch of training (a plain fit has none)."""
        return None

    def end_step(self, trainer: pl.Trainer) -> int:
        """The global step the fit ends at."""
        return max(int(trainer.estimated_stepping_batches), 1)


class _EpochLine:
    """For a ProgressBar: ``epoch N/M done in X s`` and the epoch's figures. Lightning reduces them
    after the callbacks' ``on_train_epoch_end``: the line waits for the next epoch or the fit's end."""

    needs_logged_step_loss = False  # ClassifierModule then logs the step loss for its loggers only
    count = FitCount()
    _started = 0.0
    _done: tuple[str, float] | None = None  # (epoch, seconds)

    def _log_epoch(self, trainer: pl.Trainer) -> None:
        if self._done is not None:
            (epoch, seconds), self._done = self._done, None
            m = trainer.callback_metrics
            figures = "  ".join(f"{k} {float(m[k]):.4f}" for k in ("train/loss_epoch", "val/loss", "val/acc") if k in m)
            log.info("%s done in %.2f s  %s", epoch, seconds, figures)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)  # type: ignore[misc]
        self._started = time.monotonic()  # a run resumed mid-epoch gets no on_train_epoch_start

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._log_epoch(trainer)
        super().on_train_epoch_start(trainer, pl_module)  # type: ignore[misc]
        self._started = time.monotonic()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)  # type: ignore[misc]
        if self.is_enabled:  # type: ignore[attr-defined]
            self._done = (_epoch(trainer, self.count), time.monotonic() - self._started)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._log_epoch(trainer)
        super().on_train_end(trainer, pl_module)  # type: ignore[misc]


class RichBar(_EpochLine, RichProgressBar):
    """Lightning's Rich bar showing the step loss, read at most twice a second; its default shows the
    prog_bar values, which Lightning turns into floats after every batch (a host sync on a GPU)."""

    _next_read = 0.0
    _shown: dict[str, float] | None = None

    def __init__(self, *args: Any, count: FitCount | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.count = count or FitCount()

    def _get_train_description(self, current_epoch: int) -> str:
        # Lightning's says "Epoch 0/2" for the first of 3: the run's own numbering instead ("Epoch 1/3").
        description = _epoch(self.trainer, self.count).capitalize()
        return f"{description:{len(self.validation_description)}}"  # as Lightning pads it: no flicker

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        now, loss = time.monotonic(), getattr(pl_module, "last_step_loss", None)
        last_batch = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch  # the epoch's final figure
        if loss is not None and (now >= self._next_read or last_batch):
            self._next_read, self._shown = now + 0.5, {"loss": float(loss)}
        return self._shown or {}


class LineProgress(_EpochLine, ProgressBar):
    """A log line every ``1/lines_per_epoch`` of an epoch but no oftener than every ``min_steps`` steps (a short
    epoch, ``trainer.limit_train_batches=20``, is not a line per step), and at least every ``every_s`` seconds;
    with the step, the latest loss (the training step's output), throughput and the time left."""

    MIN_STEPS = 5  # a 20-batch epoch prints 3 lines, not 19

    def __init__(self, lines_per_epoch: int = 20, every_s: float = 30.0, min_steps: int | None = None,
                 count: FitCount | None = None) -> None:
        super().__init__()
        self.count = count or FitCount()
        self.lines_per_epoch, self.every_s, self._enabled = lines_per_epoch, every_s, True
        self.min_steps = self.MIN_STEPS if min_steps is None else min_steps

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._fit_start = self._last_line = time.monotonic()
        self._first_step, self._samples = trainer.global_step, 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self._samples += extract_batch_size(batch)
        done, total, now = batch_idx + 1, self.total_train_batches, time.monotonic()
        every = max(self.min_steps, int(total) // self.lines_per_epoch) if math.isfinite(total) else 100
        if not self._enabled or done == total or (done % every and now - self._last_line < self.every_s):
            return  # at the epoch's last batch, the epoch line follows
        self._last_line = now
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        elapsed, steps = max(now - self._fit_start, 1e-9), trainer.global_step - self._first_step
        left = max(self.count.end_step(trainer) - trainer.global_step, 0)
        parts = [_epoch(trainer, self.count), f"step {done}/{total}" if math.isfinite(total) else f"step {done}",
                 f"loss {float(loss):.4f}" if loss is not None else "",
                 f"{steps / elapsed:.1f} it/s ({self._samples / elapsed:,.0f} samples/s)",
                 f"eta {timedelta(seconds=round(left * elapsed / steps))}" if steps else ""]
        log.info("  ".join(p for p in parts if p))


def _epoch(trainer: pl.Trainer, count: FitCount) -> str:
    """``epoch N/M``, counted from 1 as everywhere in a run (checkpoint names, metrics.json)."""
    if (name := count.extra_pass(trainer)) is not None:
        return name
    last = count.epochs(trainer) or -1  # -1, None: no limit
    return f"epoch {trainer.current_epoch + 1}" + (f"/{last}" if last > 0 else "")


def progress_bar(stream: Any = None, count: FitCount | None = None) -> ProgressBar:
    """The Rich bar in a terminal; plain lines elsewhere, and where Rich is missing (log lines
    would land on a tqdm bar's line). ``count``: how the fit counts its epochs and steps."""
    isatty = getattr(stream if stream is not None else sys.stdout, "isatty", None)
    terminal = importlib.util.find_spec("rich") and callable(isatty) and isatty()
    return RichBar(count=count) if terminal else LineProgress(count=count)
