"""The LightningModule that trains any classifier modelforge builds."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from modelforge.optim import build_scheduler, configure_optimizers, schedule_length

STAGES = ("train", "val", "test")


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
        self.acc = nn.ModuleDict({f"{stage}_acc": MulticlassAccuracy(n_classes, average="micro") for stage in STAGES})
        self.channels_last = channels_last
        self.compile_model = compile
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)

    def configure_model(self) -> None:
        # Runs after callbacks' setup, i.e. after hook plugins attach: compile sees them.
        # nn.Module.compile keeps state_dict keys unchanged, unlike torch.compile(module).
        if self.compile_model:
            self.model.compile()

    def on_train_start(self) -> None:
        # A resumed run may be longer than the run it resumes (trainer.max_epochs raised):
        # the restored schedule would end early, so rebuild it for the new length from here on.
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        config = self.hparams.config
        for sched_config in self.trainer.lr_scheduler_configs:
            if schedule_length(sched_config.scheduler) not in (None, total):
                sched_config.scheduler = build_scheduler(
                    sched_config.scheduler.optimizer, config.get("sched"), total,
                    sched_config.scheduler.optimizer.defaults["lr"],
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
        accuracy(logits, y)
        on_step = stage == "train"
        # Under DDP, val/test loss is averaged over ranks (it picks checkpoints); the per-step
        # train loss stays rank 0's, which saves an all-reduce on every step. Accuracy is a
        # torchmetrics metric and syncs its own state.
        self.log(f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=True, sync_dist=stage != "train")
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=True)
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
