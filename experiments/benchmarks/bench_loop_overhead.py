"""What the training loop itself adds per step, on a model so small that the loop is most of the step.

Four sides, alternated in one process (A B C D A B C D ...) on the same MNIST batches (batch 32),
AdamW + OneCycle stepped every batch, label smoothing 0.1:

- ``raw PyTorch loop``: forward, loss, zero_grad, backward, step, schedule step;
- ``bare Lightning``: the same in a minimal ``LightningModule``, on a ``Trainer`` with no logger,
  no checkpoints, no progress bar, no model summary (Lightning's own automatic-optimization loop);
- ``bare Lightning, manual optimization``: the same module stepping its optimizer and schedule
  itself (``automatic_optimization = False``): what leaving automatic optimization would save;
- ``modelforge train``: :func:`modelforge.train.train` of the same model and recipe, with the run's
  callbacks (checkpoints, divergence guard, resume state, LR monitor), metrics and CSV logger.

The model is a single linear layer (784 -> 10), so a step's compute is well under a millisecond
and what each side adds shows plainly; the added time per step does not depend on the model.
Each figure is the median over steps of one batch's start to the next one's. The Lightning sides
read the time from a callback (``bench_step_timer``, a user callback registered the documented
way), which costs them one more callback than they would have.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import logging
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from modelforge import build_model
from modelforge.data import MNISTDataModule
from modelforge.registry import CALLBACKS

MODEL = {"name": "mlp", "hidden_sizes": [], "dropout": 0.0}
LR, WEIGHT_DECAY, MAX_LR_FACTOR, PCT_START, SMOOTHING, BATCH = 1e-3, 5e-4, 10.0, 0.2, 0.1, 32
STAMPS: list[float] = []  # batch start times of the current Lightning side


@CALLBACKS.register("bench_step_timer")
class StepTimer(pl.Callback):
    """Records when each training batch starts (and when the last one ends) into ``STAMPS``."""

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        STAMPS.append(time.perf_counter())

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        STAMPS.append(time.perf_counter())  # (includes the epoch's validation: dropped below)


def _optimizer(params: Any, steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    optimizer = torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)
    return optimizer, torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR * MAX_LR_FACTOR, total_steps=steps,
                                                          pct_start=PCT_START)


class BareModule(pl.LightningModule):
    def __init__(self, model: torch.nn.Module, steps: int) -> None:
        super().__init__()
        self.model, self.steps = model, steps
        self.loss = torch.nn.CrossEntropyLoss(label_smoothing=SMOOTHING)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return self.loss(self.model(x), y)

    def configure_optimizers(self) -> Any:
        optimizer, schedule = _optimizer(self.parameters(), self.steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class BareManualModule(BareModule):
    """``BareModule`` with manual optimization: the step zeroes, backpropagates and steps itself."""

    def __init__(self, model: torch.nn.Module, steps: int) -> None:
        super().__init__(model, steps)
        self.automatic_optimization = False

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        optimizer, schedule = self.optimizers(), self.lr_schedulers()
        x, y = batch
        loss = self.loss(self.model(x), y)
        optimizer.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        optimizer.step()
        schedule.step()
        return loss


def _median_step(stamps: list[float], steps: int) -> float:
    gaps = [b - a for a, b in zip(stamps, stamps[1:])][:steps - 1]  # batch start to the next batch's start
    return statistics.median(gaps)


def raw_side(model: torch.nn.Module, loader: Any, steps: int) -> float:
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=SMOOTHING)
    optimizer, schedule = _optimizer(model.parameters(), steps)
    stamps = []
    for x, y in itertools.islice(loader, steps):
        stamps.append(time.perf_counter())
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    stamps.append(time.perf_counter())
    return _median_step(stamps, steps)


def bare_side(model: torch.nn.Module, loader: Any, steps: int, module: type[BareModule] = BareModule) -> float:
    STAMPS.clear()
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=steps, limit_val_batches=0,
                         num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[StepTimer()])
    trainer.fit(module(model, steps), train_dataloaders=loader)
    return _median_step(STAMPS, steps)


def modelforge_side(data_dir: str, steps: int, work: Path) -> float:
    from hydra import compose, initialize_config_dir

    from modelforge.config import conf_dir
    from modelforge.train import train

    STAMPS.clear()
    overrides = ["model=mlp", "model.hidden_sizes=[]", "model.dropout=0.0", "optim=adamw", f"optim.lr={LR}",
                 f"optim.weight_decay={WEIGHT_DECAY}", "sched=onecycle", f"sched.max_lr_factor={MAX_LR_FACTOR}",
                 f"sched.pct_start={PCT_START}", f"label_smoothing={SMOOTHING}", f"data.batch_size={BATCH}",
                 f"data.data_dir={data_dir}", "trainer.accelerator=cpu", "trainer.max_epochs=1",
                 f"trainer.limit_train_batches={steps}", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
                 "trainer.enable_progress_bar=false", "+callbacks.bench_step_timer={}"]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    with contextlib.redirect_stdout(io.StringIO()):  # the run's metrics table
        train(cfg, run_dir=work / f"run{len(list(work.iterdir()))}")
    return _median_step(STAMPS, steps)


def measure(data_dir: str, steps: int, rounds: int) -> dict[str, list[float]]:
    """Per side, the median step time (s) of each round."""
    warnings.filterwarnings("ignore")
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "modelforge"):
        logging.getLogger(name).setLevel(logging.ERROR)
    data = MNISTDataModule(data_dir=data_dir, batch_size=BATCH, seed=0)
    data.setup("fit")
    loader = data.train_dataloader()
    model = build_model(MODEL, seed=0)
    work = Path(tempfile.mkdtemp(prefix="mf_bench_loop_"))
    sides = {"raw PyTorch loop": lambda: raw_side(copy.deepcopy(model), loader, steps),
             "bare Lightning": lambda: bare_side(copy.deepcopy(model), loader, steps),
             "bare Lightning, manual optimization": lambda: bare_side(copy.deepcopy(model), loader, steps,
                                                                      BareManualModule),
             "modelforge train": lambda: modelforge_side(data_dir, steps, work)}
    for side in sides.values():  # warm-up: imports, first-call costs
        side()
    values: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(rounds):
        for name, side in sides.items():
            values[name].append(side())
        print(f"  [{i + 1}/{rounds}] " + ", ".join(f"{k} {v[-1] * 1e3:.3f} ms" for k, v in values.items()), flush=True)
    return values
