"""The LightningModule that trains any classifier modelforge builds."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from modelforge.train.optim import (
    build_scheduler,
    configure_optimizers,
    planned_epochs,
    schedule_length,
)

STAGES = ("train", "val", "test")
STEP_LOSS_DISPLAY_S = 0.5  # how often a bar other than modelforge's gets the step loss logged for it
# Batches whose predicted labels are gathered per accuracy update. An update costs ~70 us of CPU
# (torchmetrics' bookkeeping) whatever its size: updating every batch added ~0.1 ms to each step.
METRIC_UPDATE_EVERY = 32
log = logging.getLogger(__name__)


class ClassifierModule(pl.LightningModule):
    """Cross-entropy classification of a built ``nn.Module``.

    Args:
        model: the network (built by :func:`modelforge.build_model` or by hand).
        config: the run config as plain containers; stored in checkpoints as
            hyperparameters so ``eval`` can rebuild the model from it.
        n_classes: number of classes for the accuracy metrics.
        label_smoothing: cross-entropy label smoothing.
        channels_last: run convolutions in NHWC memory format (faster on GPUs).
        compile: wrap the forward in ``torch.compile`` once hooks are attached.
    """

    def __init__(
        self,
        model: nn.Module,
        config: dict[str, Any],
        n_classes: int = 10,
        label_smoothing: float = 0.0,
        channels_last: bool = False,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.loss = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        # One metric object per stage (torchmetrics keeps state between updates); keys avoid
        # the name `train`, which nn.ModuleDict reserves. Micro average = plain accuracy.
        # validate_args=False: the checks (a torch.unique per update) cost more than the update on
        # the training hot path; labels are checked when the data is read, logits are ours.
        self.acc = nn.ModuleDict({f"{stage}_acc": MulticlassAccuracy(n_classes, average="micro", validate_args=False)
                                  for stage in STAGES})
        self.channels_last = channels_last
        self.compile_model = compile
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self._loss_sum: dict[str, Tensor] = {}  # per stage: sum of loss * batch size this epoch
        self._seen: dict[str, int] = {}  # per stage: samples this epoch
        self._pending: dict[str, list[tuple[Tensor, Tensor]]] = {}  # per stage: (predicted, true) labels
        self._next_shown = 0.0
        self._log_for_bar = False  # set in on_train_start: whether the run's bar reads prog_bar metrics
        # The latest training loss (a tensor: reading it is a host sync on a GPU), for progress bars.
        self.last_step_loss: Tensor | None = None
        if getattr(model, "input_shape", None) is not None:
            # Only Lightning's model summary (trainer.enable_model_summary=true) runs it: true FLOPs.
            self.example_input_array = torch.zeros(1, *model.input_shape)

    def configure_model(self) -> None:
        # Runs after callbacks' setup, i.e. after hook plugins attach: compile sees them.
        # nn.Module.compile keeps state_dict keys unchanged, unlike torch.compile(module).
        if self.compile_model:
            self.model.compile()

    def on_train_start(self) -> None:
        # Lightning converts every prog_bar value it holds to a float after every batch, the stale
        # ones too: a host sync per step on a GPU. modelforge's bars read last_step_loss when they
        # draw instead; another bar (a user's choice) still gets the step loss with prog_bar=True.
        bar = self.trainer.progress_bar_callback
        self._log_for_bar = bar is not None and getattr(bar, "needs_logged_step_loss", True)
        # A resumed run may end at another step than the run it resumes planned for (more
        # epochs, fewer batches per epoch): re-plan the schedule to end with this run, from here on.
        config = self.hparams.config
        end = schedule_end_step(self.trainer, config.get("sched"))
        for sched_config in self.trainer.lr_scheduler_configs:
            planned = schedule_length(sched_config.scheduler)
            if planned in (None, end) or end <= self.global_step:
                continue
            ends = "this run ends" if planned_epochs(config.get("sched")) is None else "sched.epochs ends it"
            log.info("resuming at step %d of a schedule planned for %d steps; %s at step %d: "
                     "the schedule is re-planned over %d steps, continuing from step %d",
                     self.global_step, planned, ends, end, end, self.global_step)
            sched_config.scheduler = build_scheduler(
                sched_config.scheduler.optimizer, config.get("sched"), end, sched_config.scheduler.optimizer.defaults["lr"],
                last_step=self.global_step - 1,
            )

    def forward(self, x: Tensor) -> Tensor:
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.model(x)

    def _step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        x, y = batch
        logits = self(x)
        loss = self.loss(logits, y)
        self._gather_predictions(stage, logits, y)
        # Epoch figures are accumulated here and logged once per epoch (``_log_epoch``): a
        # ``self.log`` call costs about 0.7 ms on the CPU (Lightning walks its result object each
        # time), i.e. two calls per step were ~7% of a 20 ms MNIST step. Tensors only: no host sync.
        n = len(y)
        detached = loss.detach()
        self._loss_sum[stage] = self._loss_sum.get(stage, 0) + detached.float() * n
        self._seen[stage] = self._seen.get(stage, 0) + n
        if stage == "train":
            self.last_step_loss = detached
            if self._log_step_loss():
                self.log("train/loss_step", detached, on_step=True, on_epoch=False, prog_bar=self._log_for_bar,
                         batch_size=n)
        return loss

    def _gather_predictions(self, stage: str, logits: Tensor, y: Tensor) -> None:
        """Keep this batch's predicted labels; the stage's accuracy is updated every
        ``METRIC_UPDATE_EVERY`` batches and at the end of the epoch (``_update_accuracy``)."""
        pending = self._pending.setdefault(stage, [])
        pending.append((logits.detach().argmax(1), y))  # argmax(1): what the metric does with logits
        if len(pending) >= METRIC_UPDATE_EVERY:
            self._update_accuracy(stage)

    def _update_accuracy(self, stage: str) -> None:
        pending = self._pending.pop(stage, None)
        if pending:
            predicted, true = zip(*pending)
            self.acc[f"{stage}_acc"].update(torch.cat(predicted), torch.cat(true))

    def _log_step_loss(self) -> bool:
        """Log the step loss only where a logger writes it (every ``log_every_n_steps``, as
        Lightning's logger connector counts) or, for a bar that reads logged values, every 0.5 s."""
        if (self.global_step + 1) % max(self.trainer.log_every_n_steps, 1) == 0:
            return True
        now = time.monotonic()
        if self._log_for_bar and now >= self._next_shown:
            self._next_shown = now + STEP_LOSS_DISPLAY_S
            return True
        return False

    def _start_epoch(self, stage: str) -> None:
        self._loss_sum.pop(stage, None)
        self._seen.pop(stage, None)
        self._pending.pop(stage, None)
        self.acc[f"{stage}_acc"].reset()

    def _log_epoch(self, stage: str) -> None:
        """``<stage>/loss`` (mean over samples) and ``<stage>/acc`` of the epoch, as Lightning's
        ``on_epoch=True`` logged them; averaged over DDP ranks (accuracy syncs its own state)."""
        seen = self._seen.pop(stage, 0)
        total = self._loss_sum.pop(stage, None)
        if seen and total is not None:
            mean = total / seen
            if stage == "train":  # the names Lightning gave a step-and-epoch value: train/loss_epoch
                self.log("train/loss_epoch", mean, prog_bar=True, sync_dist=True)
                self.log("train/loss", mean, logger=False, sync_dist=True)  # what monitor=train/loss reads
            else:
                self.log(f"{stage}/loss", mean, prog_bar=True, sync_dist=True)
        self._update_accuracy(stage)
        accuracy = self.acc[f"{stage}_acc"]
        if accuracy.update_count:
            self.log(f"{stage}/acc", accuracy.compute(), prog_bar=True)
        accuracy.reset()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def on_train_epoch_start(self) -> None:
        self._start_epoch("train")

    def on_train_epoch_end(self) -> None:
        self._log_epoch("train")

    def on_validation_epoch_start(self) -> None:
        self._start_epoch("val")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_start(self) -> None:
        self._start_epoch("test")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def configure_optimizers(self) -> Any:
        config = self.hparams.config
        total_steps = schedule_end_step(self.trainer, config.get("sched"))
        return configure_optimizers(self.model, config["optim"], config.get("sched"), total_steps)


def schedule_end_step(trainer: pl.Trainer, sched_cfg: Any) -> int:
    """The step a planned schedule ends at: ``sched.epochs`` epochs when set, else where this fit ends."""
    epochs = planned_epochs(sched_cfg)
    end = fit_end_step(trainer)  # also sets up the training data, so num_training_batches is known
    if epochs is None or not math.isfinite(trainer.num_training_batches):
        return end
    return max(epochs * math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches), 1)

def fit_end_step(trainer: pl.Trainer) -> int:
    """The global step this fit ends at; a resumed run counts on from its checkpoint's step."""
    total = max(int(trainer.estimated_stepping_batches), 1)
    if not trainer.global_step or not math.isfinite(trainer.num_training_batches):
        return total
    per_epoch = math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches)
    progress = trainer.fit_loop.epoch_loop.batch_progress  # a mid-epoch checkpoint resumes mid-epoch
    done = 0 if progress.is_last_batch else progress.current.completed // trainer.accumulate_grad_batches
    end = math.inf
    if trainer.max_epochs is not None and trainer.max_epochs >= 0:
        end = trainer.global_step + max(trainer.max_epochs - trainer.current_epoch, 0) * per_epoch - done
    if trainer.max_steps != -1:
        end = min(end, trainer.max_steps)
    return int(end) if math.isfinite(end) else total
