"""Building the Lightning Trainer, its callbacks and logger, and the data module, from config."""

from __future__ import annotations

import functools
import inspect
import logging
import re
import typing
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from modelforge.config import resolve_target
from modelforge.config_types import check_type
from modelforge.data.build import build_datamodule  # noqa: F401 - run.py imports it from here
from modelforge.errors import ConfigError, UnknownKeyError, UnknownNameError
from modelforge.report.console import verbose
from modelforge.report.progress import progress_bar
from modelforge.train import checkpoints as ckpts
from modelforge.train import launch
from modelforge.train.cuda_graph_checks import check_one_device
from modelforge.train.callbacks import (
    DEFAULT_LOG_EVERY_N_STEPS,
    StepLogInterval,
    build_callbacks,
    build_loggers,
)
from modelforge.train.ddp_teardown import StopTogether
from modelforge.train.fit_count import RunFitCount
from modelforge.train.hook_callback import HookPluginsCallback
from modelforge.tasks import metric_mode


def default_precision(accelerator: str) -> str:
    """bf16 mixed precision on a GPU that has it, full float32 elsewhere."""
    on_gpu = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if on_gpu and torch.cuda.is_bf16_supported() else "32-true"


def resolved_device(options: Mapping[str, Any]) -> dict[str, str]:
    """The accelerator kind and precision that ``trainer.*`` ``options`` train with on this machine (what ``auto``
    and a null precision pick): a run records them, so that ``eval`` tests its checkpoint the way it was trained."""
    accelerator = str(options.get("accelerator") or "auto")
    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    accelerator = "gpu" if accelerator == "cuda" else accelerator
    return {"accelerator": accelerator, "precision": str(options.get("precision") or default_precision(accelerator))}


def describe_device(trainer: pl.Trainer) -> dict[str, Any]:
    """Where a run trains, for its log line and metrics.json: accelerator kind, device name, count, precision."""
    device = trainer.strategy.root_device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    kind = {"cuda": "gpu"}.get(device.type, device.type)
    return {"accelerator": kind, "name": name, "devices": trainer.num_devices * trainer.num_nodes,
            "precision": str(trainer.precision)}


def available(accelerator: str) -> bool:
    """Whether this machine has ``accelerator`` (a kind :func:`resolved_device` names)."""
    return {"gpu": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}.get(accelerator, True)


def _callbacks(config: Mapping[str, Any], run_dir: Path, hooks: list[Callback], logged: bool,
               extra: Sequence[Callback]) -> list[Callback]:
    monitor = config.get("monitor", "val/acc")
    ckpt_dir = run_dir / "checkpoints"
    chosen = build_callbacks(config.get("callbacks"), monitor)
    # Few: Lightning dispatches every hook of every callback at every step. The divergence guard and the resume
    # state are driven by ClassifierModule's own hooks; StopTogether joins DDP runs only (build_trainer).
    callbacks: list[Callback] = [
        ckpts.EpochCheckpoint(dirpath=ckpt_dir, filename="best-epoch{epoch:02d}", auto_insert_metric_name=False,
                              monitor=monitor, mode=metric_mode(monitor)),
        ckpts.RunCheckpoints(ckpt_dir),  # last.ckpt after every epoch and at the end; interrupted.ckpt on a crash
        *hooks, *chosen,
        *extra,  # the caller's: e.g. a sweep's trial pruning (report monitor, stop when its pruner says)
    ]
    has_lr_monitor = any(isinstance(c, pl.callbacks.LearningRateMonitor) for c in chosen)
    if logged and not has_lr_monitor and (config.get("sched") or {}).get("_target_") is not None:
        callbacks.append(pl.callbacks.LearningRateMonitor(logging_interval="step"))
    return callbacks


def build_trainer(config: Mapping[str, Any], run_dir: Path, plugins: Sequence[Any], for_eval: bool = False,
                  extra_callbacks: Sequence[Callback] = ()) -> pl.Trainer:
    """A Trainer whose checkpoints and logs live in ``run_dir``; ``extra_callbacks`` come from the caller."""
    options = dict(config.get("trainer") or {})  # checked by the caller (check_trainer_options)
    target = options.pop("_target_", None) or "pytorch_lightning.Trainer"
    if options.get("precision") is None:
        options["precision"] = default_precision(str(options.get("accelerator", "auto")))
    logger = [] if for_eval else build_loggers(config.get("logger"), run_dir)
    hooks = [HookPluginsCallback(list(plugins), run_dir=run_dir)] if plugins else []
    callbacks = hooks if for_eval else _callbacks(config, run_dir, hooks, logged=bool(logger), extra=extra_callbacks)
    if logger and options.get("log_every_n_steps") in (None, DEFAULT_LOG_EVERY_N_STEPS):  # Lightning's, not a user's
        callbacks.append(StepLogInterval())
    has_bar = any(isinstance(c, pl.callbacks.ProgressBar) for c in callbacks)
    if options.get("enable_progress_bar", True) is not False and not has_bar:
        callbacks.append(progress_bar(count=RunFitCount()))  # a bar in a terminal, plain lines in a file or job log
    if options.get("enable_model_summary") is None:
        options["enable_model_summary"] = verbose()  # modelforge logs a one-line description instead
    if for_eval:
        options["enable_checkpointing"] = False
    # Checkpoints are written by temp file + fsync + rename (a user's plugins come first).
    own = options.pop("plugins", None)
    own = [] if own is None else list(own) if isinstance(own, (list, tuple)) else [own]
    make = instantiate({"_target_": target, "_partial_": True, **options}, _convert_="all")
    try:
        trainer = make(default_root_dir=str(run_dir), logger=logger or False, callbacks=callbacks,
                       plugins=[*own, ckpts.AtomicCheckpointIO()])
    except (MisconfigurationException, ValueError) as exc:  # e.g. a user's plugin Lightning refuses
        raise lightning_refusal(exc) from None
    if trainer.world_size > 1 and not for_eval:
        trainer.callbacks.append(StopTogether())  # under DDP, a stop signal ends every rank at the same batch
    return trainer


# Set by modelforge itself (a user value would silently fight the run directory layout), with where to set them.
RESERVED_TRAINER_KEYS = {
    "logger": "choose loggers with the logger group: logger=csv, logger=[csv,tensorboard]",
    "callbacks": "add Lightning callbacks with the callbacks group: callbacks=[early_stopping,lr_monitor]",
    "default_root_dir": "runs go to hydra.run.dir",
}


@functools.cache
def trainer_argument_types() -> dict[str, Any]:
    """Each ``pl.Trainer`` argument a config may set, with its annotation (from the installed Lightning)."""
    names = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self", *RESERVED_TRAINER_KEYS}
    hints = typing.get_type_hints(pl.Trainer.__init__)
    return {name: hints.get(name, Any) for name in sorted(names)}


def check_accelerator(options: Mapping[str, Any]) -> None:
    """Accelerator and strategy names Lightning knows, and a GPU only where there is one."""
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.strategies import StrategyRegistry

    for key, allowed in (("accelerator", ["auto", "gpu", *AcceleratorRegistry.available_accelerators()]),
                         ("strategy", ["auto", *StrategyRegistry.available_strategies()])):
        value = options.get(key, "auto")
        if isinstance(value, str) and value not in allowed:
            raise UnknownNameError(key, value, allowed, path=f"trainer.{key}")
    accelerator = str(options.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError("trainer.accelerator", f"{accelerator!r} asked for, but this machine has no CUDA GPU that "
                          f"torch can use (torch {torch.__version__}, torch.cuda.is_available() is False)",
                          allowed="auto, cpu" + (", mps" if torch.backends.mps.is_available() else ""),
                          hint="trainer=ddp_cpu runs DDP as CPU processes; "
                               "trainer.accelerator=auto uses a GPU when there is one")


def check_trainer_options(options: Mapping[str, Any]) -> None:
    """Every ``trainer.*`` key must be a ``pl.Trainer`` argument modelforge does not set, of its type."""
    accepted, options = trainer_argument_types(), dict(options)
    cls = resolve_target(options.pop("_target_", None) or "pytorch_lightning.Trainer", "trainer", "pytorch_lightning",
                         (), pl.Trainer)
    for key, value in options.items():
        if key in RESERVED_TRAINER_KEYS:
            raise ConfigError(f"trainer.{key}", "is set by modelforge", hint=RESERVED_TRAINER_KEYS[key])
        if key not in accepted:
            raise UnknownKeyError(f"trainer.{key}", key, f"pl.Trainer takes no argument {key!r}", sorted(accepted))
        check_type(value, accepted[key], f"trainer.{key}")
    check_accelerator(options)
    # Lightning's own value checks (ranges, combinations such as max_epochs=-5), before any run
    # directory exists: a Trainer with nothing to write is built and thrown away (~5 ms).
    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    lightning_log = logging.getLogger("pytorch_lightning")
    level = lightning_log.level
    lightning_log.setLevel(logging.ERROR)  # its device banner comes once, from the run's own Trainer
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = cls(**{**options, **quiet})
    except (MisconfigurationException, ValueError, TypeError) as exc:  # TypeError: devices=-1 on a CPU
        raise lightning_refusal(exc, options) from None
    finally:
        lightning_log.setLevel(level)
    launch.check_layout(built.num_devices, built.num_nodes)  # under torchrun or srun: the processes it started


@dataclass
class TrainerPlan:
    """``trainer.*`` of a run config, checked when made (:func:`check_trainer_options`; with ``one_device``, as for
    ``cuda_graph=true``, one GPU in one process first): ``pl.Trainer``'s arguments, each of its type, with the
    accelerator kind and precision that this machine trains with resolved (:func:`resolved_device`)."""

    given: InitVar[Mapping[str, Any]]
    one_device: InitVar[bool] = False
    options: dict[str, Any] = field(init=False)
    accelerator: str = field(init=False)
    precision: str = field(init=False)

    def __post_init__(self, given: Mapping[str, Any], one_device: bool) -> None:
        if one_device:  # before Lightning's checks: devices=-1 or "0,1" is refused for what it asks, anywhere
            check_one_device(given)
        check_trainer_options(given)
        device = resolved_device(given)
        self.options, self.accelerator, self.precision = {**given, **device}, device["accelerator"], device["precision"]


# What Lightning takes as trainer.devices, by accelerator (its parse_devices): said with its refusal.
DEVICES_ALLOWED = {"cpu": "auto, or a number of processes >= 1 (trainer.devices=1)",
                   "gpu": "auto, a number of GPUs >= 1, -1 for all, or GPU indices: [0,1] or '0,1'"}


def lightning_refusal(exc: Exception, options: Mapping[str, Any] | None = None) -> ConfigError:
    """Lightning's word on the ``trainer.*`` values, as modelforge's error: under the key its message names (in
    backticks first: ```devices` selected with `CPUAccelerator` ...``), when the config has that key."""
    options = options or {}
    names = [*re.findall(r"`(\w+)`", str(exc)), *re.findall(r"\w+", str(exc))]
    named = next((name for name in names if name in options), None)
    if named is None:
        return ConfigError("trainer", str(exc), hint="`--cfg job` prints the trainer options this run got")
    allowed = None
    if named == "devices":
        allowed = DEVICES_ALLOWED.get(resolved_device(options)["accelerator"])
    return ConfigError(f"trainer.{named}", f"{options[named]!r} refused by Lightning: {exc}", allowed=allowed)
