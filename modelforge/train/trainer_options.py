"""``trainer.*`` options checked against ``pl.Trainer.__init__``: its argument names and their types."""

from __future__ import annotations

import functools
import inspect
import logging
import typing
import warnings
from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from modelforge.config import check_type
from modelforge.errors import ConfigError, UnknownNameError, closest_names

# Set by modelforge itself; a user value would silently fight the run directory layout.
RESERVED_TRAINER_KEYS = ("logger", "callbacks", "default_root_dir")
_RESERVED_HINTS = {
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


def check_trainer_options(options: Mapping[str, Any]) -> None:
    """Every ``trainer.*`` key must be a ``pl.Trainer`` argument modelforge does not set, of its type."""
    accepted = trainer_argument_types()
    for key, value in options.items():
        if key in RESERVED_TRAINER_KEYS:
            raise ConfigError(f"trainer.{key}", "is set by modelforge", hint=_RESERVED_HINTS[key])
        if key not in accepted:
            raise ConfigError(f"trainer.{key}", f"pl.Trainer takes no argument {key!r}",
                              suggestions=closest_names(key, accepted), allowed=sorted(accepted))
        check_type(value, accepted[key], f"trainer.{key}")
    check_accelerator(options)
    _check_values_with_lightning(options)


def lightning_refusal(exc: Exception) -> ConfigError:
    """Lightning's word on the ``trainer.*`` values, as modelforge's error."""
    return ConfigError("trainer", str(exc), hint="`--cfg job` prints the trainer options this run got")


def _check_values_with_lightning(options: Mapping[str, Any]) -> None:
    """Lightning's own checks of the values (ranges, combinations such as ``max_epochs=-5``), before
    any run directory exists: a Trainer with nothing to write is built and thrown away (~5 ms)."""
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
             "enable_model_summary": False}
    lightning_log = logging.getLogger("pytorch_lightning")
    level = lightning_log.level
    lightning_log.setLevel(logging.ERROR)  # its device banner comes once, from the run's own Trainer
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pl.Trainer(**{**options, **quiet})
    except (MisconfigurationException, ValueError) as exc:
        raise lightning_refusal(exc) from None
    finally:
        lightning_log.setLevel(level)
