"""The segment task's training: ``modelforge train task=segment model=unet`` vs a hand-written torch loop.

Two sides, alternated in one process (A B A B ...), on the same ``mnist_segment`` data module, batches and recipe:

- ``hand-written torch loop``: the U-Net written in plain ``torch.nn`` (hand_written_unet.py), with the initial
  weights of the run's model (checked to give the same outputs), the data module's loaders, the run's Adam at its
  ``optim.lr`` with ``OneCycleLR`` stepped every batch (the run's ``sched=onecycle``), cross-entropy with
  ``ignore_index=255``; each epoch its training steps and one validation pass (loss and mean IoU, torchmetrics'
  ``MulticlassJaccardIndex``, as the run's main metric);
- ``modelforge train``: :func:`modelforge.train.train` of ``task=segment model=unet``, the same limits: with the
  run's callbacks (checkpoints, divergence guard, resume state), its metrics (IoU and Dice, train and val) and
  CSV logger.

The figure is the time of one epoch (its training steps and its validation pass), from the epoch's start to its
end (a user callback, ``bench_epoch_timer``, registered the documented way, on the modelforge side); the ratio is
the median over rounds of modelforge / hand-written, each round's two epochs run back to back.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hand_written_unet import hand_written_unet

from modelforge.registry import CALLBACKS

EPOCHS: list[float] = []  # the modelforge side's epoch times


@CALLBACKS.register("bench_epoch_timer")
class EpochTimer(pl.Callback):
    """Records each training epoch's time, its validation pass included (Lightning validates inside the epoch)."""

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        EPOCHS.append(time.perf_counter() - self._start)


def _overrides(data_dir: str, train_batches: int, val_batches: int) -> list[str]:
    return ["task=segment", "model=unet", f"data.data_dir={data_dir}", "trainer.accelerator=cpu",
            "trainer.max_epochs=1", f"trainer.limit_train_batches={train_batches}",
            f"trainer.limit_val_batches={val_batches}", "trainer.limit_test_batches=1",
            "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false"]


def _compose(overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir

    from modelforge.config import conf_dir

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("train", overrides=overrides)


def modelforge_side(cfg: Any, work: Path) -> float:
    from modelforge.train import train

    EPOCHS.clear()
    with contextlib.redirect_stdout(io.StringIO()):  # the run's metrics table
        train(cfg, run_dir=work / f"run{len(list(work.iterdir()))}")
    return EPOCHS[0]


def segment_data(cfg: Any, data_dir: str) -> Any:
    """The run's ``mnist_segment`` data module, set up (derived once: the hand-written side reuses it)."""
    from modelforge.config import load_config
    from modelforge.data.mnist_tasks import MnistSegmentDataModule

    plain_cfg = load_config(cfg)
    data = MnistSegmentDataModule(data_dir=data_dir, batch_size=plain_cfg["data"]["batch_size"], seed=plain_cfg["seed"])
    data.setup("fit")
    return data


def hand_written_side(cfg: Any, data: Any, train_batches: int, val_batches: int) -> float:
    """One epoch of the hand-written loop, on the run's data, model, init and recipe; its seconds."""
    from torchmetrics.classification import MulticlassJaccardIndex

    from modelforge.build import build_model, model_config_from_run
    from modelforge.config import load_config
    from modelforge.data.shapes import fill_model_shapes

    plain_cfg = load_config(cfg)
    seed, lr = plain_cfg["seed"], plain_cfg["optim"]["lr"]
    pl.seed_everything(seed, verbose=False)  # as the run: the shuffling order
    built = build_model(fill_model_shapes(model_config_from_run(plain_cfg), data), seed=seed)  # as the run builds it
    sizes = plain_cfg["model"]["params"]["enc_sizes"]
    model = hand_written_unet(built, sizes, data.n_classes)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=255)
    iou = MulticlassJaccardIndex(data.n_classes, average="macro", ignore_index=255, validate_args=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=train_batches, pct_start=0.25,
                                                   div_factor=25.0, final_div_factor=1e4)
    start = time.perf_counter()
    model.train()
    for x, y in itertools.islice(data.train_dataloader(), train_batches):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    loss_sum, seen = torch.zeros(()), 0
    with torch.inference_mode():
        for x, y in itertools.islice(data.val_dataloader(), val_batches):
            logits = model(x)
            loss_sum += loss_fn(logits, y) * len(y)
            seen += len(y)
            iou.update(logits.argmax(1), y)
    float(loss_sum / seen), float(iou.compute())  # read, as an epoch's end logs them
    return time.perf_counter() - start


def measure(data_dir: str, train_batches: int, val_batches: int, rounds: int) -> dict[str, list[float]]:
    """Per side, the epoch time (s) of each round; the first round of each (warm-up) is left out."""
    warnings.filterwarnings("ignore")
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "modelforge"):
        logging.getLogger(name).setLevel(logging.ERROR)
    cfg = _compose(_overrides(data_dir, train_batches, val_batches))
    timed = _compose([*_overrides(data_dir, train_batches, val_batches), "+callbacks.bench_epoch_timer={}"])
    work = Path(tempfile.mkdtemp(prefix="mf_bench_segment_"))
    data = segment_data(cfg, data_dir)
    sides = {"hand-written torch loop": lambda: hand_written_side(cfg, data, train_batches, val_batches),
             "modelforge train": lambda: modelforge_side(timed, work)}
    values: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(rounds + 1):
        order = list(sides) if i % 2 == 0 else list(sides)[::-1]  # who goes first alternates: no position bias
        for name in order:
            seconds = sides[name]()
            if i:  # round 0 warms up: imports, the data's first derivation, first-call costs
                values[name].append(seconds)
        if i:
            print(f"  [{i}/{rounds}] " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in values.items()), flush=True)
    return values


def pair_ratios(values: dict[str, list[float]]) -> list[float]:
    """Each round's modelforge / hand-written epoch: a drift of the machine's speed between rounds cancels."""
    return [m / h for m, h in zip(values["modelforge train"], values["hand-written torch loop"])]
