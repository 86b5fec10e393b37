"""Checkpoints: safe loading (``weights_only=True``), atomic saves, resume points and resume state."""

from __future__ import annotations

import logging
import random
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.trainer.states import TrainerFn
from torch import nn

from modelforge.errors import (
    CheckpointError,
    ConfigError,
    Diverged,
    Interrupted,
    RunStopped,
    Terminated,
    is_allocation_failure,
)
from modelforge.train.records import write_with

log = logging.getLogger(__name__)

LAST_CKPT = "last.ckpt"
INTERRUPTED_CKPT = "interrupted.ckpt"
KEY = "modelforge_resume"
# torch._weights_only_unpickler: "Detected pickle protocol 5 in the checkpoint, which was not the default ..."
_PROTOCOL_WARNING = r"Detected pickle protocol \d+ in the checkpoint"
# Lightning cannot see that the train loader resumes mid-epoch (ResumeState does it, not the loader).
_MID_EPOCH_WARNING = r"You're resuming from a checkpoint that ended before the epoch ended"


def load_checkpoint(path: str | Path, key: str = "ckpt_path") -> dict[str, Any]:
    """Read a modelforge checkpoint with ``weights_only=True`` (no arbitrary pickles run)."""
    ckpt_path = Path(path).expanduser()
    if not ckpt_path.is_file():
        raise CheckpointError(f"{key}: no checkpoint file at {ckpt_path}")
    try:
        with warnings.catch_warnings():
            # A file pickled with another protocol than torch's 2 (pickle.dump, torch.save(pickle_protocol=5))
            # draws torch's warning just before the refusal below: the user gets one message, ours.
            warnings.filterwarnings("ignore", message=_PROTOCOL_WARNING, category=UserWarning)
            ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a bad file; all mean "not loadable"
        raise CheckpointError(f"{key}: {ckpt_path} is not a loadable checkpoint ({_reason(exc)})") from None
    config = ckpt.get("hyper_parameters", {}).get("config") if isinstance(ckpt, dict) else None
    if not isinstance(config, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{key}: {ckpt_path} is not a modelforge checkpoint (it has no stored run config)")
    return ckpt


def _reason(exc: Exception) -> str:
    """Torch's error in one line, without its advice to re-run with ``weights_only=False`` (that runs the pickle)."""
    kept = []
    for line in (line.strip() for line in str(exc).splitlines()):
        if line.startswith("Weights only load failed"):
            kept.append("weights-only load refused it")
        elif line and not re.search(r"weights_only|Re-running|documentation of torch.load", line, re.IGNORECASE):
            kept.append(line.rstrip("."))
    return ": ".join(kept[:2]) or type(exc).__name__


def check_fits(ckpt: dict[str, Any], module: nn.Module, key: str = "ckpt_path") -> None:
    """Raise when the checkpoint's weights do not match ``module``'s parameters by name and shape."""
    saved = {k: tuple(v.shape) for k, v in ckpt["state_dict"].items()}
    wanted = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    reshaped = sorted(k for k in set(saved) & set(wanted) if saved[k] != wanted[k])
    details = [f"{what}: {', '.join(names[:3])}" for what, names in (
        ("shapes differ", [f"{k} {saved[k]} vs {wanted[k]}" for k in reshaped]),
        ("missing from the checkpoint", sorted(set(wanted) - set(saved))),
        ("not in this model", sorted(set(saved) - set(wanted)))) if names]
    if details:
        model = ckpt["hyper_parameters"]["config"].get("model", {})
        brief = " ".join(f"{k}={model[k]}" for k in ("enc_sizes", "dec_sizes", "hidden_sizes") if k in model)
        raise CheckpointError(f"{key}: the checkpoint holds a different model than this config builds "
                              f"(checkpoint model: {model.get('name')} {brief}); " + "; ".join(details))


def checkpoint_nbytes(checkpoint: Any) -> int:
    """The bytes of tensor data in ``checkpoint``: about what ``torch.save`` writes."""
    if isinstance(checkpoint, torch.Tensor):
        return checkpoint.numel() * checkpoint.element_size()
    if isinstance(checkpoint, (dict, list, tuple)):
        return sum(map(checkpoint_nbytes, checkpoint.values() if isinstance(checkpoint, dict) else checkpoint))
    return 0


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose saves are all-or-nothing, on local paths."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        write_with(Path(path), lambda handle: torch.save(checkpoint, handle), needed=checkpoint_nbytes(checkpoint))


class LastCheckpoint(ModelCheckpoint):
    """Keeps ``DIR/last.ckpt`` current: after every epoch, and when fit ends (``fast_dev_run`` included)."""

    def __init__(self, dirpath: str | Path) -> None:
        super().__init__(dirpath=dirpath, filename=Path(LAST_CKPT).stem, monitor=None, save_top_k=1,
                         enable_version_counter=False)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if trainer.state.fn == TrainerFn.FITTING and self._last_global_step_saved != trainer.global_step:
            trainer.save_checkpoint(Path(self.dirpath) / LAST_CKPT, weights_only=False)  # a resume point: the full state
            self._last_global_step_saved = trainer.global_step


class CheckpointOnException(Callback):
    """Saves weights, optimizer and loop state to ``path`` when fitting stops on an exception.

    Not Lightning's ``OnExceptionCheckpoint``: installed, it turns every ``fit(ckpt_path=None)`` into
    ``fit(ckpt_path="last")``, a silent resume; modelforge resumes only when asked (``ckpt_path=``).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # Testing changes no weights; a resume would diverge / run out of memory again: offer no resume point.
        if trainer.state.fn != TrainerFn.FITTING or isinstance(exception, Diverged) \
                or is_allocation_failure(exception):
            return
        try:
            trainer.save_checkpoint(self.path, weights_only=False)  # a resume point: the full state
        except Exception as exc:  # a loss checked late (on a GPU) was bad, a full disk: the run's error comes first
            log.error("%s the training state to %s: %s", "not saving" if isinstance(exc, Diverged) else
                      "could not save", self.path, exc)
            return
        log.info("saved the training state at step %d to %s", trainer.global_step, self.path)


def capture_rng() -> dict[str, Any]:
    """The RNG states of python, numpy, torch (CPU) and every CUDA device."""
    # Checkpoints load with weights_only=True: tuples become lists, numpy arrays are refused.
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state(),
                             "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                                       float(cached)]}
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


class ResumeState(Callback):
    """Saves and restores RNG states and the train sampler's position."""

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        state: dict[str, Any] = {"rng": capture_rng()}
        sampler = getattr(trainer.datamodule, "train_sampler", None)
        if sampler is not None:
            done = trainer.fit_loop.epoch_loop.batch_progress.current.completed
            epoch_done = done >= trainer.num_training_batches
            # The first unfinished epoch, and how many of its samples were trained on.
            state["shuffle"] = {**sampler.state(), "epoch": trainer.current_epoch + int(epoch_done),
                                "skip": 0 if epoch_done else done * int(getattr(trainer.datamodule, "batch_size", 1))}
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
        if shuffle and hasattr(trainer.datamodule, "resume_shuffle"):
            trainer.datamodule.resume_shuffle(shuffle["seed"], shuffle["epoch"], shuffle["skip"])


def failure_record(reason: BaseException, run_dir: Path) -> dict[str, Any]:
    """What metrics.json says of a run that stopped on ``reason``, and how to resume it."""
    status = reason.status if isinstance(reason, RunStopped) else "failed"
    failure: dict[str, Any] = {"status": status, "error": f"{type(reason).__name__}: {reason}"}
    candidates = [run_dir / "checkpoints" / INTERRUPTED_CKPT]
    if isinstance(reason, (Terminated, Interrupted)):
        candidates.append(run_dir / "checkpoints" / LAST_CKPT)  # stopped while testing: the fit is complete
    # Checkpoints are written by rename (AtomicCheckpointIO): one that exists is whole.
    resume = next((p for p in candidates if p.is_file() and p.stat().st_size > 0), None)
    if resume is not None:
        failure["resume_with"] = f"ckpt_path={resume}"
        if isinstance(reason, RunStopped):
            reason.resume_with = failure["resume_with"]  # the CLI's message says it too
        log.error("training stopped (%s); its state is in %s: resume with ckpt_path=%s", status, resume, resume)
    return failure


def check_epochs_left(ckpt: dict[str, Any], trainer_cfg: dict[str, Any]) -> None:
    """Refuse a resume that has no epoch left to train (it would test the weights again and stop)."""
    done = ckpt.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {}).get("current", {}).get("processed")
    max_epochs = trainer_cfg.get("max_epochs")
    by_steps = trainer_cfg.get("max_steps") not in (None, -1)
    if isinstance(done, int) and isinstance(max_epochs, int) and 0 <= max_epochs <= done and not by_steps:
        raise ConfigError("trainer.max_epochs", f"the checkpoint has trained {done} epochs, so "
                          f"trainer.max_epochs={max_epochs} leaves nothing to train",
                          hint=f"resume with trainer.max_epochs={done + 1} or more")
