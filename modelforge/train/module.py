"""The LightningModule that trains any classifier modelforge builds."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from modelforge.optim import build_scheduler, configure_optimizers, schedule_length

STAGES = ("train", "val", "test")
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
        if getattr(model, "input_shape", None) is not None:
            # Only Lightning's model summary (trainer.enable_model_summary=true) runs it: true FLOPs.
            self.example_input_array = torch.zeros(1, *model.input_shape)

    def configure_model(self) -> None:
        # Runs after callbacks' setup, i.e. after hook plugins attach: compile sees them.
        # nn.Module.compile keeps state_dict keys unchanged, unlike torch.compile(module).
        if self.compile_model:
            self.model.compile()

    def on_train_start(self) -> None:
        # A resumed run may end at another step than the run it resumes planned for (more
        # epochs, fewer batches per epoch): re-plan the schedule to end with this run, from here on.
        end = fit_end_step(self.trainer)
        config = self.hparams.config
        for sched_config in self.trainer.lr_scheduler_configs:
            planned = schedule_length(sched_config.scheduler)
            if planned in (None, end) or end <= self.global_step:
                continue
            log.info("resuming at step %d of a schedule planned for %d steps; this run ends at step %d: "
                     "the schedule is re-planned over %d steps, continuing from step %d",
                     self.global_step, planned, end, end, self.global_step)
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
        accuracy = self.acc[f"{stage}_acc"]
        accuracy.update(logits, y)  # not accuracy(...): no per-batch value is computed, none is logged
        on_step = stage == "train"
        # Under DDP, val/test loss is averaged over ranks (it picks checkpoints); the per-step
        # train loss stays rank 0's, which saves an all-reduce on every step. Accuracy is a
        # torchmetrics metric and syncs its own state. Logged values stay tensors: the progress
        # bar and the logger read them only every few steps (modelforge.train.progress).
        n = len(y)  # given, so Lightning does not search the batch for its size on every call
        self.log(f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=True, sync_dist=stage != "train",
                 batch_size=n)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=True, batch_size=n)
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> Any:
        config = self.hparams.config
        total_steps = max(int(self.trainer.estimated_stepping_batches), 1)
        return configure_optimizers(self.model, config["optim"], config.get("sched"), total_steps)

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
