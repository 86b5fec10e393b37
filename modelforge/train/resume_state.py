"""Resume equals never stopping: RNG states and the shuffle position travel in the checkpoint.

Lightning restores weights, optimizer, schedule and loop counters, but re-seeds nothing: a
resumed run would draw other dropout masks and another batch order than the run it continues.
This callback stores, at every save, the RNG states of python, numpy, torch and CUDA, and the
train sampler's seed, epoch and position; on load it puts the RNG states back (Lightning runs
its sanity check under ``isolate_rng``, so nothing draws between here and the first resumed
step) and tells the sampler where to continue. Exact with ``data.num_workers=0`` (the default);
a random augmentation (``data.augment_shift``) of the batch Lightning had prefetched when a
run stopped mid-epoch is drawn again, so such a resume differs from that batch on.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

KEY = "modelforge_resume"

# Lightning cannot see that the train loader resumes mid-epoch (ResumeState does it, not the loader).
_MID_EPOCH_WARNING = r"You're resuming from a checkpoint that ended before the epoch ended"


def capture_rng() -> dict[str, Any]:
    """The RNG states of python, numpy, torch (CPU) and every CUDA device."""
    state: dict[str, Any] = {
        "python": list(_plain(random.getstate())),
        "numpy": _numpy_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _plain(value: Any) -> Any:
    # Checkpoints load with weights_only=True: tuples become lists, numpy arrays are refused.
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def _numpy_state() -> list[Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)]


def _train_sampler(trainer: pl.Trainer) -> Any:
    datamodule = trainer.datamodule
    return getattr(datamodule, "train_sampler", None) if datamodule is not None else None


class ResumeState(Callback):
    """Saves and restores RNG states and the train sampler's position."""

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        state: dict[str, Any] = {"rng": capture_rng()}
        sampler = _train_sampler(trainer)
        if sampler is not None:
            done = trainer.fit_loop.epoch_loop.batch_progress.current.completed
            epoch_done = done >= trainer.num_training_batches
            # The first unfinished epoch, and how many of its samples were trained on.
            state["shuffle"] = {**sampler.state(), "epoch": trainer.current_epoch + int(epoch_done),
                                "skip": 0 if epoch_done else done * _batch_size(trainer)}
        checkpoint[KEY] = state

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Set here, as the resume starts, not once at import: a caller's warnings.catch_warnings()
        # (pytest wraps each test in one) would drop a filter set while it was active.
        warnings.filterwarnings("ignore", message=_MID_EPOCH_WARNING)
        state = checkpoint.get(KEY)
        if not state:
            return  # a checkpoint from before this callback: resumes as Lightning alone does
        restore_rng(state["rng"])
        shuffle = state.get("shuffle")
        datamodule = trainer.datamodule
        if shuffle and datamodule is not None and hasattr(datamodule, "resume_shuffle"):
            datamodule.resume_shuffle(shuffle["seed"], shuffle["epoch"], shuffle["skip"])


def _batch_size(trainer: pl.Trainer) -> int:
    return int(getattr(trainer.datamodule, "batch_size", 1))
