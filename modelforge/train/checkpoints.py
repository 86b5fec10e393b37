"""Checkpoints: safe loading (``weights_only=True``), atomic saves, resume points and resume state."""

from __future__ import annotations

import logging
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.trainer.states import TrainerFn

from modelforge.errors import (
    ConfigError,
    Diverged,
    Interrupted,
    RunStopped,
    Terminated,
    is_allocation_failure,
)
from modelforge.files.atomic import write_with
from modelforge.files.write_faults import UnwritableError, write_fault

log = logging.getLogger(__name__)

LAST_CKPT = "last.ckpt"
INTERRUPTED_CKPT = "interrupted.ckpt"
KEY = "modelforge_resume"
# Lightning cannot see that the train loader resumes mid-epoch (ResumeState does it, not the loader).
_MID_EPOCH_WARNING = r"You're resuming from a checkpoint that ended before the epoch ended"


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


class EpochCheckpoint(ModelCheckpoint):
    """A ModelCheckpoint that saves at epoch ends only, made cheap on the steps between.

    Lightning asks every callback for its ``state_key`` at every hook of every step (for its profiler's labels), and
    ModelCheckpoint builds it anew each time as a repr of its settings; they are fixed here, so it is built once. Its
    per-batch check (``every_n_train_steps``, ``train_time_interval``) has nothing to do without those settings.
    ``STATE_NAME`` is the class name that heads the key: the name the checkpoints of earlier runs stored this
    callback's state under, so that resuming one restores it.
    """

    STATE_NAME = "ModelCheckpoint"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._every_n_train_steps or self._train_time_interval:
            raise ValueError(f"{type(self).__name__} saves at epoch ends only")
        self._state_key = f"{self.STATE_NAME}" + repr(dict(
            monitor=self.monitor, mode=self.mode, every_n_train_steps=self._every_n_train_steps,
            every_n_epochs=self._every_n_epochs, train_time_interval=self._train_time_interval))

    @property
    def state_key(self) -> str:
        return self._state_key

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        return None  # no per-step saving to check

    def _monitor_candidates(self, trainer: pl.Trainer) -> dict[str, torch.Tensor]:
        # What {epoch} in a file name reads: counted from 1, as the run's lines count ("epoch 1/1": best-epoch01).
        candidates = super()._monitor_candidates(trainer)
        if "epoch" not in trainer.callback_metrics:  # an epoch the module logged itself is left as it is
            candidates["epoch"] = torch.tensor(trainer.current_epoch + 1)
        return candidates


class RunCheckpoints(EpochCheckpoint):
    """The run's resume points: ``DIR/last.ckpt`` after every epoch and when fit ends (``fast_dev_run`` included), and
    ``DIR/interrupted.ckpt`` with weights, optimizer and loop state when fitting stops on an exception.

    One callback for both: Lightning dispatches every hook of every callback at every step (~20 us each on a
    2-core CPU), so the run keeps its callbacks few. Not Lightning's ``OnExceptionCheckpoint``: installed, it turns
    every ``fit(ckpt_path=None)`` into ``fit(ckpt_path="last")``, a silent resume; modelforge resumes only when
    asked (``ckpt_path=``).
    """

    STATE_NAME = "LastCheckpoint"  # this class's name before interrupted.ckpt joined it

    def __init__(self, dirpath: str | Path) -> None:
        super().__init__(dirpath=dirpath, filename=Path(LAST_CKPT).stem, monitor=None, save_top_k=1,
                         enable_version_counter=False)
        self.interrupted_path = Path(dirpath) / INTERRUPTED_CKPT

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if trainer.state.fn == TrainerFn.FITTING and self._last_global_step_saved != trainer.global_step:
            trainer.save_checkpoint(Path(self.dirpath) / LAST_CKPT, weights_only=False)  # a resume point: the full state
            self._last_global_step_saved = trainer.global_step

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        super().on_exception(trainer, pl_module, exception)
        # Testing changes no weights; a resume would diverge / run out of memory again: offer no resume point.
        if trainer.state.fn != TrainerFn.FITTING or isinstance(exception, Diverged) \
                or is_allocation_failure(exception):
            return
        if isinstance(write_fault(exception, Path(self.dirpath).parent), UnwritableError):
            return  # the run directory turned read-only: no state can be saved there, as the run's error says
        try:
            trainer.save_checkpoint(self.interrupted_path, weights_only=False)  # a resume point: the full state
        except Exception as exc:  # a loss checked late (on a GPU) was bad, a full disk: the run's error comes first
            log.error("%s the training state to %s: %s", "not saving" if isinstance(exc, Diverged) else
                      "could not save", self.interrupted_path, exc)
            return
        log.info("saved the training state at step %d to %s", trainer.global_step, self.interrupted_path)


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


class ResumeState:
    """Saves and restores RNG states and the train sampler's position, in the checkpoint's ``modelforge_resume``.

    Driven by the LightningModule's own checkpoint hooks (``ClassifierModule``), not registered as a callback:
    Lightning dispatches every hook of every callback at every step."""

    @staticmethod
    def save(trainer: pl.Trainer, checkpoint: dict[str, Any]) -> None:
        state: dict[str, Any] = {"rng": capture_rng()}
        sampler = getattr(trainer.datamodule, "train_sampler", None)
        if sampler is not None:
            done = trainer.fit_loop.epoch_loop.batch_progress.current.completed
            epoch_done = done >= trainer.num_training_batches
            # The first unfinished epoch, and how many of its samples were trained on.
            state["shuffle"] = {**sampler.state(), "epoch": trainer.current_epoch + int(epoch_done),
                                "skip": 0 if epoch_done else done * int(getattr(trainer.datamodule, "batch_size", 1))}
        checkpoint[KEY] = state

    @staticmethod
    def load(trainer: pl.Trainer | None, checkpoint: dict[str, Any]) -> None:
        # Set here, as the resume starts, not once at import: a caller's warnings.catch_warnings()
        # (pytest wraps each test in one) would drop a filter set while it was active.
        warnings.filterwarnings("ignore", message=_MID_EPOCH_WARNING)
        if trainer is not None and trainer.ckpt_path:
            log.info("resuming from %s: %s", trainer.ckpt_path, resume_point(checkpoint))
        state = checkpoint.get(KEY)
        if not state:
            return  # a checkpoint from before resume state was kept: resumes as Lightning alone does
        restore_rng(state["rng"])
        shuffle = state.get("shuffle")
        datamodule = getattr(trainer, "datamodule", None)
        if shuffle and hasattr(datamodule, "resume_shuffle"):
            datamodule.resume_shuffle(shuffle["seed"], shuffle["epoch"], shuffle["skip"])


def resume_point(checkpoint: dict[str, Any]) -> str:
    """Where a checkpoint resumes, in words: ``1 epoch done, global step 6, 64 samples into epoch 2``."""
    shuffle = (checkpoint.get(KEY) or {}).get("shuffle") or {}
    progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {}).get("current", {})
    done = int(shuffle.get("epoch", progress.get("processed", 0)))
    text = f"{done} epoch{'s' if done != 1 else ''} done, global step {checkpoint.get('global_step', 0)}"
    return text + (f", {shuffle['skip']} samples into epoch {done + 1}" if shuffle.get("skip") else "")


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


# What decides which parameters the optimizer holds and how it groups them: a resume must keep them.
GROUPING_KEYS = ("freeze", "optim.param_groups", "optim.no_decay_norm_bias")


def check_optimizer_fits(ckpt: dict[str, Any], ckpt_path: str, optimizer: torch.optim.Optimizer,
                         config: dict[str, Any]) -> None:
    """Refuse a resume whose optimizer is not the checkpoint's: another class, or the parameters chosen or grouped
    otherwise. torch would fail while Lightning restores it, or put one parameter's moments on another."""
    afresh = f"start a new run from these weights with a fresh optimizer: leave out ckpt_path and give init.from={ckpt_path}"
    if "optimizer_states" not in ckpt:
        raise ConfigError("ckpt_path", f"{ckpt_path} holds weights but no optimizer state: it cannot be resumed",
                          hint=afresh)
    if not (states := ckpt["optimizer_states"]):
        return

    def value(cfg: Any, key: str) -> Any:
        for part in key.split("."):
            cfg = cfg.get(part) if isinstance(cfg, dict) else None
        return [cfg] if isinstance(cfg, str) and key == "freeze" else cfg or None  # [], {}, false, null: none

    stored = ckpt["hyper_parameters"]["config"]
    changed = [f"{key}={value(stored, key) or 'unset'} then, {value(config, key) or 'unset'} now"
               for key in GROUPING_KEYS if value(stored, key) != value(config, key)]
    # The class by name (torch.optim.adam.Adam is torch.optim.Adam); a checkpoint from before _target_ has optim.name.
    was = str(value(stored, "optim._target_") or value(stored, "optim.name") or "")
    if was and was.rpartition(".")[2].lower() != type(optimizer).__name__.lower():
        changed.insert(0, f"optimizer {was} then, {type(optimizer).__name__} now")
    saved, now = [len(g["params"]) for g in states[0]["param_groups"]], [len(g["params"]) for g in optimizer.param_groups]
    if changed or saved != now:
        raise ConfigError("ckpt_path", f"a resume continues the checkpoint's optimizer, whose parameter groups hold "
                          f"{saved} tensors; this config builds {type(optimizer).__name__} with {now}"
                          + (f": {'; '.join(changed)}" if changed else ""),
                          hint=f"resume with the run's own freeze and optim settings, or {afresh}")


def resume_checkpoint(path: str | Path, network: torch.nn.Module, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The checkpoint file ``path`` names (a run directory: its last.ckpt, else its best), read (``weights_only``)
    and checked against the run that resumes it: a modelforge checkpoint of this model, with an epoch left to train
    and the optimizer this config builds. All before the run directory is made: a refusal leaves nothing."""
    from modelforge.deploy.load import check_fits, load_checkpoint, resolve_checkpoint
    from modelforge.train.optim import build_optimizer

    found = resolve_checkpoint(path)[0]
    ckpt = load_checkpoint(found)
    check_fits(ckpt, torch.nn.ModuleDict({"model": network}))  # the keys of ClassifierModule's state_dict
    check_epochs_left(ckpt, config.get("trainer") or {})
    check_optimizer_fits(ckpt, str(found), build_optimizer(network, config["optim"]), config)
    return str(found), ckpt


def check_epochs_left(ckpt: dict[str, Any], trainer_cfg: dict[str, Any]) -> None:
    """Refuse a resume that has no epoch left to train (it would test the weights again and stop)."""
    done = ckpt.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {}).get("current", {}).get("processed")
    max_epochs = trainer_cfg.get("max_epochs")
    by_steps = trainer_cfg.get("max_steps") not in (None, -1)
    if isinstance(done, int) and isinstance(max_epochs, int) and 0 <= max_epochs <= done and not by_steps:
        raise ConfigError("trainer.max_epochs", f"the checkpoint has trained {done} epochs, so "
                          f"trainer.max_epochs={max_epochs} leaves nothing to train",
                          hint=f"resume with trainer.max_epochs={done + 1} or more")
