"""Building the Lightning Trainer, its callbacks and logger, and the data module, from config."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger, Logger, TensorBoardLogger
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from modelforge.errors import ConfigError, UnknownNameError, closest_names
from modelforge.layers.kwargs import check_kwargs
from modelforge.train.checkpoint_io import AtomicCheckpointIO
from modelforge.train.interrupted import INTERRUPTED_CKPT, CheckpointOnException
from modelforge.train.last_checkpoint import LastCheckpoint
from modelforge.train.run_safety import run_safety_callbacks

# Set by modelforge itself; a user value would silently fight the run directory layout.
RESERVED_TRAINER_KEYS = ("logger", "callbacks", "default_root_dir")
LOGGERS = ("csv", "tensorboard")


def check_trainer_options(options: Mapping[str, Any]) -> None:
    """Every ``trainer.*`` key must be an argument of ``pl.Trainer`` that modelforge does not set."""
    accepted = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self", *RESERVED_TRAINER_KEYS}
    for key in options:
        if key in RESERVED_TRAINER_KEYS:
            raise ConfigError(f"trainer.{key}", "is set by modelforge",
                              hint="choose a logger with logger=csv|tensorboard; runs go to hydra.run.dir")
        if key not in accepted:
            raise ConfigError(f"trainer.{key}", f"pl.Trainer takes no argument {key!r}",
                              suggestions=closest_names(key, accepted), allowed=sorted(accepted))


def default_precision(accelerator: str) -> str:
    """bf16 mixed precision on a GPU that has it, full float32 elsewhere."""
    on_gpu = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if on_gpu and torch.cuda.is_bf16_supported() else "32-true"


def build_datamodule(data_cfg: Mapping[str, Any]) -> pl.LightningDataModule:
    """The data module named by ``data.name`` (only ``mnist`` today), with its options checked."""
    from modelforge.data import MNISTDataModule

    datamodules = {"mnist": MNISTDataModule}
    options = dict(data_cfg)
    name = options.pop("name", "mnist")
    if name not in datamodules:
        raise UnknownNameError("dataset", name, datamodules, path="data.name")
    check_kwargs(datamodules[name], options, "data", f"data module {name!r}")
    return datamodules[name](**options)


def _logger(name: str | None, run_dir: Path) -> Logger | bool:
    if name is None:
        return False
    if name not in LOGGERS:
        raise UnknownNameError("logger", name, LOGGERS, path="logger.name")
    if name == "tensorboard":
        return TensorBoardLogger(save_dir=str(run_dir), name="logs", version="")
    return CSVLogger(save_dir=str(run_dir), name="logs", version="")


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
    if plugins:
        from modelforge.train.hook_callback import HookPluginsCallback

        callbacks.append(HookPluginsCallback(list(plugins), run_dir=run_dir))
    if logged and (config.get("sched") or {}).get("name", "none") != "none":
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    return callbacks


def build_trainer(config: Mapping[str, Any], run_dir: Path, plugins: Sequence[Any], for_eval: bool = False) -> pl.Trainer:
    """A Trainer whose checkpoints and logs live in ``run_dir``."""
    options = dict(config.get("trainer") or {})
    check_trainer_options(options)
    if options.get("precision") is None:
        options["precision"] = default_precision(str(options.get("accelerator", "auto")))
    logger_name = None if for_eval else (config.get("logger") or {}).get("name")
    logger = _logger(logger_name, run_dir)
    callbacks = [] if for_eval else _callbacks(config, run_dir, plugins, logged=bool(logger))
    if for_eval:
        options["enable_checkpointing"] = False
    check_accelerator(options)
    try:
        # Checkpoints are written by temp file + fsync + rename (a user's plugins come first).
        options["plugins"] = [*_as_list(options.get("plugins")), AtomicCheckpointIO()]
        return pl.Trainer(default_root_dir=str(run_dir), logger=logger, callbacks=callbacks, **options)
    except (MisconfigurationException, ValueError) as exc:  # Lightning's word on the options
        raise ConfigError("trainer", str(exc), hint="`--cfg job` prints the trainer options this run got") from None


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def check_accelerator(options: Mapping[str, Any]) -> None:
    """Accelerator and strategy names Lightning knows, and a GPU only where there is one."""
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.strategies import StrategyRegistry

    names = {
        "accelerator": ["auto", "gpu", *AcceleratorRegistry.available_accelerators()],
        "strategy": ["auto", *StrategyRegistry.available_strategies()],
    }
    for key, allowed in names.items():
        value = options.get(key, "auto")
        if isinstance(value, str) and value not in allowed:
            raise UnknownNameError(key, value, allowed, path=f"trainer.{key}")
    accelerator = str(options.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            "trainer.accelerator",
            f"{accelerator!r} asked for, but this machine has no CUDA GPU that torch can use "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False)",
            allowed="auto, cpu" + (", mps" if torch.backends.mps.is_available() else ""),
            hint="trainer=ddp_cpu runs DDP as CPU processes; trainer.accelerator=auto uses a GPU when there is one",
        )


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
