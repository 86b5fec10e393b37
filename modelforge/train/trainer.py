"""Building the Lightning Trainer, its callbacks and logger, and the data module, from config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, LearningRateMonitor, ModelCheckpoint, ProgressBar
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from modelforge.data.build import build_datamodule  # noqa: F401 - run.py imports it from here
from modelforge.console import verbose
from modelforge.train.callbacks import build_callbacks
from modelforge.train.checkpoint_io import AtomicCheckpointIO
from modelforge.train.interrupted import INTERRUPTED_CKPT, CheckpointOnException
from modelforge.train.last_checkpoint import LastCheckpoint
from modelforge.train.loggers import build_loggers, step_log_interval
from modelforge.train.progress import progress_bar
from modelforge.train.run_safety import run_safety_callbacks
from modelforge.train.trainer_options import check_trainer_options  # noqa: F401 - re-exported
from modelforge.train.trainer_options import lightning_refusal


def default_precision(accelerator: str) -> str:
    """bf16 mixed precision on a GPU that has it, full float32 elsewhere."""
    on_gpu = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if on_gpu and torch.cuda.is_bf16_supported() else "32-true"


def _callbacks(config: Mapping[str, Any], run_dir: Path, plugins: Sequence[Any], logged: bool) -> list[Callback]:
    monitor = config.get("monitor", "val/acc")
    ckpt_dir = run_dir / "checkpoints"
    callbacks: list[Callback] = [
        ModelCheckpoint(dirpath=ckpt_dir, filename="best-epoch{epoch:02d}", auto_insert_metric_name=False,
                        monitor=monitor, mode="min" if monitor.endswith("loss") else "max"),
        LastCheckpoint(ckpt_dir),  # last.ckpt after every epoch (save_last=True lags behind: see its module)
        # A crash or Ctrl-C mid-epoch keeps the weights and loop state of that moment.
        CheckpointOnException(ckpt_dir / INTERRUPTED_CKPT),
        *run_safety_callbacks(config),  # divergence stop; RNG and shuffle position in checkpoints
    ]
    callbacks += _hooks(plugins, run_dir)
    chosen = build_callbacks(config.get("callbacks"), monitor)
    callbacks.extend(chosen)
    has_lr_monitor = any(isinstance(c, LearningRateMonitor) for c in chosen)
    if logged and not has_lr_monitor and (config.get("sched") or {}).get("name", "none") != "none":
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    return callbacks


def _hooks(plugins: Sequence[Any], run_dir: Path) -> list[Callback]:
    from modelforge.train.hook_callback import HookPluginsCallback

    return [HookPluginsCallback(list(plugins), run_dir=run_dir)] if plugins else []


def build_trainer(config: Mapping[str, Any], run_dir: Path, plugins: Sequence[Any], for_eval: bool = False) -> pl.Trainer:
    """A Trainer whose checkpoints and logs live in ``run_dir``."""
    options = dict(config.get("trainer") or {})  # checked by the caller (check_trainer_options)
    if options.get("precision") is None:
        options["precision"] = default_precision(str(options.get("accelerator", "auto")))
    logger = [] if for_eval else build_loggers(config.get("logger"), run_dir)
    callbacks = _hooks(plugins, run_dir) if for_eval else _callbacks(config, run_dir, plugins, logged=bool(logger))
    if logger:
        callbacks += step_log_interval(options.get("log_every_n_steps"))
    if options.get("enable_progress_bar", True) is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(progress_bar())  # a bar in a terminal, plain lines in a file or job log
    if options.get("enable_model_summary") is None:
        options["enable_model_summary"] = verbose()  # modelforge logs a one-line description instead
    if for_eval:
        options["enable_checkpointing"] = False
    try:
        # Checkpoints are written by temp file + fsync + rename (a user's plugins come first).
        options["plugins"] = [*_as_list(options.get("plugins")), AtomicCheckpointIO()]
        return pl.Trainer(default_root_dir=str(run_dir), logger=logger or False, callbacks=callbacks, **options)
    except (MisconfigurationException, ValueError) as exc:  # e.g. a user's plugin Lightning refuses
        raise lightning_refusal(exc) from None


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def hydra_overrides() -> list[str]:
    """The command-line overrides of this Hydra job ([] outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def format_metrics(metrics: Mapping[str, Any], run_dir: Path) -> str:
    """The short table printed at the end of a run."""
    rows = [(k, f"{v:.4f}" if isinstance(v, float) else str(v)) for k, v in sorted(metrics.items())
            if k.startswith(("val/", "test/", "best_")) or k in ("epochs", "train_time_s", "params", "ckpt_path")]
    width = max((len(k) for k, _ in rows), default=0)
    rule = "-" * (width + 14)
    return "\n".join([rule, *[f"{k.ljust(width)}  {v}" for k, v in rows], rule, f"run directory: {run_dir}"])
