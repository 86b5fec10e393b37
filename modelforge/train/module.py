"""The LightningModule that trains any model modelforge builds, for any task (:mod:`modelforge.tasks`)."""

from __future__ import annotations

import logging
import math
import time
import warnings
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from modelforge.models.heads import check_classifier_output
from modelforge.train.averaging import training_epochs
from modelforge.train.captured_step import WARMUP_STEPS, CapturedStep, StepSpec
from modelforge.train.checkpoints import ResumeState
from modelforge.train.compiled import compile_for_training, eagerly
from modelforge.train.optim import build_scheduler, configure_optimizers
from modelforge.train.stopping import DivergenceGuard, divergence_bound
from modelforge.tasks import build_task

STAGES = ("train", "val", "test")
STEP_LOSS_DISPLAY_S = 0.5  # how often a bar other than modelforge's gets the step loss logged for it
# Batches whose predicted labels are gathered per accuracy update. An update costs ~70 us of CPU
# (torchmetrics' bookkeeping) whatever its size: updating every batch added ~0.1 ms to each step.
METRIC_UPDATE_EVERY = 32
# A per-pixel or image output's metrics cost a third of a small U-Net's training step (the argmax, and IoU's and
# Dice's counts over every pixel: experiments/benchmarks' segment section): while training they count the batches
# whose index is a multiple of METRIC_UPDATE_EVERY, an estimate; validation and test count every batch.
DENSE_OUTPUTS = ("class_map", "image")
log = logging.getLogger(__name__)
# Tests only: on a CPU, run cuda_graph's step body (its buffers, device-side sums and hyperparameters) uncaptured
# through the same Lightning hooks as on a GPU, so that everything but the capture itself is checked without one.
STEP_BODY_WITHOUT_CUDA = False


class ClassifierModule(pl.LightningModule):
    """A built ``nn.Module`` trained for the task of ``config["task"]`` (classify when none: cross-entropy and
    accuracy); ``config`` (the run config, plain containers) is saved in checkpoints so ``eval`` can rebuild the
    model from it. ``n_classes``: the data's classes (labels, targets) that the task's metrics count."""

    def __init__(self, model: nn.Module, config: dict[str, Any], n_classes: int = 10, label_smoothing: float = 0.0,
                 channels_last: bool = False, compile: bool = False, compile_backend: str = "inductor",
                 compile_mode: str | None = None, cuda_graph: bool = False) -> None:
        super().__init__()
        self.task = build_task(config.get("task"))
        if self.task.is_classify:  # before any batch: a head of the wrong width names its node (the run checked
            check_classifier_output(model, n_classes)  # another task's output against the data's input shape)
        self.save_hyperparameters(ignore=["model"])
        self.model = model.to(memory_format=torch.channels_last) if channels_last else model
        self.loss = self.task.build_loss(label_smoothing)
        # Keys avoid the name `train`, which nn.ModuleDict reserves. validate_args=False: its checks (a
        # torch.unique per update) cost more than the update; labels are checked when the data is read.
        self.acc = nn.ModuleDict({f"{stage}_{key}": metric for stage in STAGES
                                  for key, metric in self.task.build_metrics(n_classes).items()})
        # Classify gathers METRIC_UPDATE_EVERY batches of predicted labels per update; a per-pixel or image output
        # is too large to hold that many of: its metrics are updated every batch.
        self._update_every = METRIC_UPDATE_EVERY if self.task.is_classify else 1
        self._sample_train = self.task.output in DENSE_OUTPUTS  # its training metrics count one batch in 32
        self.channels_last = channels_last  # NHWC memory format: faster convolutions on GPUs
        self._loss_sum: dict[str, Tensor] = {}  # per stage: sum of loss * batch size this epoch
        self._seen: dict[str, int] = {}  # per stage: samples this epoch
        self._pending: dict[str, list[tuple[Tensor, Tensor]]] = {}  # per stage: (predicted, true) labels
        self._next_shown = 0.0
        self._compiled = False
        self._log_for_bar = False  # set in on_train_start: whether the run's bar reads prog_bar metrics
        self._latest: dict[str, Tensor] = {}  # plain dict: nn.Module.__setattr__ costs microseconds a step
        # Driven by this module's own hooks rather than registered as callbacks: Lightning dispatches every hook of
        # every callback at every step (~20 us each on a 2-core CPU).
        self.divergence = DivergenceGuard(divergence_bound(config), config)
        self._captured: CapturedStep | None = None  # cuda_graph=true on a CUDA device, from on_train_start
        if getattr(model, "input_shape", None) is not None:
            # Only Lightning's model summary (trainer.enable_model_summary=true) runs it: true FLOPs.
            self.example_input_array = torch.zeros(1, *model.input_shape)

    def setup(self, stage: str) -> None:
        # Runs after callbacks' setup, i.e. after hook plugins attach: compile sees them. (Not configure_model:
        # a module that overrides it makes weight averaging, callbacks=[ema], warn about sharding.)
        if self.hparams.compile and not self._compiled:
            backend, mode = self.hparams.compile_backend, self.hparams.compile_mode
            compile_for_training(self.model, backend, mode)
            self._compiled = True
            log.info("compile=true: the first training step waits while torch.compile (%s%s) compiles the model; "
                     "validation and test run eagerly", backend, f", mode {mode}" if mode else "")

    @property
    def last_step_loss(self) -> Tensor | None:
        """The latest training loss (a tensor: reading it is a host sync on a GPU), for progress bars."""
        return self._latest.get("loss")

    def on_before_backward(self, loss: Tensor) -> None:
        self.divergence.on_before_backward(self.trainer, self, loss)

    # Before anything that would keep or judge the weights a bad step left behind (the check of a GPU run's last
    # loss is deferred to the next step).
    def on_validation_start(self) -> None:
        self._check_divergence()

    def on_train_end(self) -> None:
        self._check_divergence()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._check_divergence()
        ResumeState.save(self.trainer, checkpoint)  # RNG and shuffle position
        if self._captured is not None:  # resumable without a CUDA graph too: as a plain optimizer saves itself
            checkpoint["optimizer_states"] = [self._captured.portable_state(state)
                                              for state in checkpoint.get("optimizer_states", [])]

    def _check_divergence(self) -> None:
        self.divergence.check_pending(self.trainer)
        if self._captured is not None and (bad := self._captured.bad(block=True)) is not None:
            self.divergence.raise_if_bad(bad[1], self.trainer, bad[0], self.current_epoch)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        ResumeState.load(self._trainer, checkpoint)

    def on_train_start(self) -> None:
        self.divergence.on_train_start(self.trainer, self)
        # Lightning converts every prog_bar value to a float after every batch (a host sync per step on a
        # GPU): modelforge's bars read last_step_loss instead; another bar gets the step loss with prog_bar.
        bar = self.trainer.progress_bar_callback
        self._log_for_bar = bar is not None and getattr(bar, "needs_logged_step_loss", True)
        # A resumed run may end at another step than the run it resumes planned for (more epochs, fewer batches
        # per epoch), or have another optim.lr: re-plan the schedule to end with this run, from here on.
        sched = self.hparams.config.get("sched")
        end = schedule_end_step(self.trainer, sched)
        for sched_config in self.trainer.lr_scheduler_configs:
            optimizer = sched_config.scheduler.optimizer
            planned = getattr(sched_config.scheduler, "planned_steps", None)  # set by build_scheduler
            lr, planned_lr = optimizer.defaults["lr"], getattr(sched_config.scheduler, "planned_lr", None)
            if planned is None or end <= self.global_step or planned == end and planned_lr in (None, lr):
                continue
            ends = "this run ends" if (sched or {}).get("epochs") is None else "sched.epochs ends it"
            new_lr = f" at optim.lr={planned_lr:g}, now {lr:g}" if planned_lr not in (None, lr) else ""
            log.info("resuming at step %d of a schedule planned for %d steps%s; %s at step %d: "
                     "the schedule is re-planned over %d steps, continuing from step %d",
                     self.global_step, planned, new_lr, ends, end, end, self.global_step)
            sched_config.scheduler = build_scheduler(optimizer, sched, end, lr, last_step=self.global_step - 1)
        if self.hparams.cuda_graph and self._captured is None:
            self._start_captured_step()

    def forward(self, x: Tensor) -> Tensor:
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.model(x)

    def _step(self, batch: tuple[Tensor, Tensor], stage: str, batch_idx: int = 0) -> Tensor:
        x, y = batch
        if self._compiled and stage != "train":
            with eagerly():  # evaluation compiles nothing
                logits = self(x)
        else:
            logits = self(x)
        loss = self.loss(logits, y)
        # The stage's metrics are updated every METRIC_UPDATE_EVERY batches (classify) and at the end of the epoch.
        if not (self._sample_train and stage == "train" and batch_idx % METRIC_UPDATE_EVERY):
            pending = self._pending.setdefault(stage, [])
            pending.append((self.task.predictions(logits.detach()), y))  # argmax(1) of class scores, as the metric does
            if len(pending) >= self._update_every:
                self._update_accuracy(stage)
        # Epoch figures are accumulated here and logged once per epoch (``_log_epoch``): a ``self.log`` call
        # costs ~0.7 ms of CPU (two per step were ~7% of a 20 ms MNIST step). Tensors only: no host sync.
        n = len(y)
        detached = loss.detach()
        if (total := self._loss_sum.get(stage)) is None:
            self._loss_sum[stage] = detached.float() * n
        else:
            total.add_(detached, alpha=n)  # one kernel a step, in float32 whatever the loss's dtype
        self._seen[stage] = self._seen.get(stage, 0) + n
        if stage == "train":
            self._latest["loss"] = detached
            # Logged only where a logger writes it (every log_every_n_steps, as Lightning's logger
            # connector counts) or, for a bar that reads logged values, every 0.5 s.
            log_now = (self.global_step + 1) % max(self.trainer.log_every_n_steps, 1) == 0
            if not log_now and self._log_for_bar and time.monotonic() >= self._next_shown:
                self._next_shown, log_now = time.monotonic() + STEP_LOSS_DISPLAY_S, True
            if log_now:
                self.log("train/loss_step", detached, on_step=True, on_epoch=False, prog_bar=self._log_for_bar,
                         batch_size=n)
        return loss

    def _update_accuracy(self, stage: str) -> None:
        pending = self._pending.pop(stage, None)
        if pending:
            predicted, true = zip(*pending)
            predicted, true = (torch.cat(predicted), torch.cat(true)) if len(pending) > 1 else (predicted[0], true[0])
            for key in self.task.metrics:
                self.acc[f"{stage}_{key}"].update(predicted, true)

    def _start_epoch(self, stage: str) -> None:
        for per_stage in (self._loss_sum, self._seen, self._pending):
            per_stage.pop(stage, None)
        for key in self.task.metrics:
            self.acc[f"{stage}_{key}"].reset()

    def _log_epoch(self, stage: str, accuracy_value: Tensor | None = None) -> None:
        """``<stage>/loss`` (mean over samples) and ``<stage>/<metric>`` of the epoch (``<stage>/acc`` for classify),
        as Lightning's ``on_epoch=True`` logged them; averaged over DDP ranks (metrics sync their own state).
        ``accuracy_value``: classify's accuracy, counted elsewhere (a captured step counts its own)."""
        seen, total = self._seen.pop(stage, 0), self._loss_sum.pop(stage, 0.0)
        if self.trainer.world_size > 1:  # over every rank's samples: evaluation leaves ranks one sample apart
            summed = self.trainer.strategy.reduce(torch.tensor([float(total), seen], device=self.device), reduce_op="sum")
            total, seen = summed[0], int(summed[1])
        if seen:
            mean = total / seen
            if stage == "train":  # the names Lightning gave a step-and-epoch value: train/loss_epoch
                self.log("train/loss_epoch", mean, prog_bar=True, sync_dist=True)
                self.log("train/loss", mean, logger=False, sync_dist=True)  # what monitor=train/loss reads
            else:
                self.log(f"{stage}/loss", mean, prog_bar=True, sync_dist=True)
                # Weights the last training step made NaN (float16 Adam: eps is 0 there) show only here: a run
                # that ends must not call such figures finished. One host read an evaluation epoch.
                if not math.isfinite(value := float(mean)):
                    self.divergence.raise_if_bad(value, self.trainer, self.global_step, self.current_epoch)
        self._update_accuracy(stage)
        for key in self.task.metrics:
            metric = self.acc[f"{stage}_{key}"]
            if accuracy_value is not None:
                self.log(f"{stage}/{key}", accuracy_value, prog_bar=True)
            elif metric.update_count:
                # compute() already syncs over ranks; sync_dist averages equal values and tells Lightning it is synced
                self.log(f"{stage}/{key}", metric.compute().float(), prog_bar=key == self.task.main, sync_dist=True)
            metric.reset()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor | None:
        if self._captured is None:
            return self._step(batch, "train", batch_idx)
        # The graph ran forward, backward and the update: nothing is left for Lightning to backpropagate (None).
        x, y = batch
        self._latest["loss"] = self._captured.step(x, y)
        self._captured.count(len(y))
        if (bad := self._captured.bad(block=False)) is not None:
            self.divergence.raise_if_bad(bad[1], self.trainer, bad[0], self.current_epoch)
        return None

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        if self._captured is None:
            return super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        optimizer_closure()  # runs training_step, whose replay stepped the optimizer inside the graph
        return None

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        if self._captured is None:  # a replay overwrites the graph's gradients: nothing to zero
            super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def _start_captured_step(self) -> None:
        """``cuda_graph=true``: the training step captured on a CUDA device, or said why not (it trains eagerly)."""
        capture = self.device.type == "cuda"
        if not capture and not STEP_BODY_WITHOUT_CUDA:
            log.info("cuda_graph=true: this run trains on %s, not a CUDA GPU: its steps run eagerly", self.device.type)
            return
        trainer = self.trainer
        spec = StepSpec.of_trainer(trainer, max_loss=self.divergence.max_loss)
        optimizer = self.optimizers().optimizer  # the torch optimizer under Lightning's wrapper
        self._captured = CapturedStep(self, self.loss, optimizer, spec, first_step=self.global_step,
                                      capture=capture, check_every=trainer.log_every_n_steps)
        # Lightning says once that training_step returned None: on purpose here.
        warnings.filterwarnings("ignore", message=r"`training_step` returned `None`")
        log.info("cuda_graph=true: the training step runs eagerly for %d batches, then is captured in a CUDA graph and "
                 "replayed; the ragged last batch of each epoch is left out (data.drop_last)", WARMUP_STEPS)

    def _captured_epoch_accuracy(self) -> Tensor | None:
        """At a captured epoch's end: its loss sum and sample count into the epoch figures; its accuracy."""
        if self._captured is None:
            return None
        if (bad := self._captured.bad(block=True)) is not None:
            self.divergence.raise_if_bad(bad[1], self.trainer, bad[0], self.current_epoch)
        seen = self._captured.seen
        self._loss_sum["train"], self._seen["train"] = self._captured.loss_sum.clone(), seen
        return self._captured.correct.double() / max(seen, 1)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    # Each stage's state is reset when its epoch starts and logged when it ends.
    def on_train_epoch_start(self) -> None:
        self._start_epoch("train")
        if self._captured is not None:
            self._captured.start_epoch()

    def on_train_epoch_end(self) -> None: self._log_epoch("train", self._captured_epoch_accuracy())
    def on_validation_epoch_start(self) -> None: self._start_epoch("val")
    def on_validation_epoch_end(self) -> None: self._log_epoch("val")
    def on_test_epoch_start(self) -> None: self._start_epoch("test")
    def on_test_epoch_end(self) -> None: self._log_epoch("test")

    def configure_optimizers(self) -> Any:
        sched = self.hparams.config.get("sched")
        return configure_optimizers(self.model, self.hparams.config["optim"], sched,
                                    schedule_end_step(self.trainer, sched))


def schedule_end_step(trainer: pl.Trainer, sched_cfg: Any) -> int:
    """The step a planned schedule ends at: ``sched.epochs`` epochs when set, else where this fit ends."""
    epochs = (sched_cfg or {}).get("epochs")  # checked with the rest of sched before any work (optim.py)
    end = fit_end_step(trainer)  # also sets up the training data, so num_training_batches is known
    if epochs is None or not math.isfinite(trainer.num_training_batches):
        return end
    return max(epochs * math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches), 1)


def fit_end_step(trainer: pl.Trainer) -> int:
    """The global step this fit ends at; a resumed run counts on from its checkpoint's step."""
    total = max(int(trainer.estimated_stepping_batches), 1)
    max_epochs = training_epochs(trainer)  # without the pass callbacks=[swa] adds, which takes no step
    fresh = not trainer.global_step and max_epochs == trainer.max_epochs
    if fresh or not math.isfinite(trainer.num_training_batches):
        return total
    per_epoch = math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches)
    progress = trainer.fit_loop.epoch_loop.batch_progress  # a mid-epoch checkpoint resumes mid-epoch
    # An epoch that ended (its last batch completed) is done; one stopped inside its last batch reruns that batch.
    epoch_ended = progress.is_last_batch and progress.current.completed == progress.current.ready
    done = 0 if epoch_ended else progress.current.completed // trainer.accumulate_grad_batches
    # The resumed epoch runs the batches it has left; resumed past the end of a now shorter epoch
    # (trainer.limit_train_batches lowered), Lightning still runs one before it sees the epoch is over.
    left_this_epoch = per_epoch - done if done <= per_epoch else 1
    end = math.inf
    if max_epochs is not None and max_epochs >= 0:
        epochs = max(max_epochs - trainer.current_epoch, 0)
        end = trainer.global_step + (left_this_epoch + (epochs - 1) * per_epoch if epochs else 0)
    if trainer.max_steps != -1:
        end = min(end, trainer.max_steps)
    return int(end) if math.isfinite(end) else total
