"""Optuna's log lines through Python's logging, like every other library's: no colour codes in a log.

Optuna 2.x gives its logger a handler of its own on import, with colorlog's formatter: it
writes colour escapes even to a file or a pipe, in a format of its own, and stops
propagation. Its documented switches turn that handler off and let its records propagate,
so Hydra's handlers print them as they print Hydra's own lines (``[HYDRA] A new study
created in RDB with name: modelforge``) and a job's log file keeps them.
"""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

OPTUNA_SWEEPER = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


class OptunaLogging(Callback):
    """Before an Optuna sweep starts (``hparams_search=optuna``), routes Optuna's logger to the root logger."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.sweeper.get("_target_") != OPTUNA_SWEEPER:
            return
        import optuna

        optuna.logging.disable_default_handler()
        optuna.logging.enable_propagation()
