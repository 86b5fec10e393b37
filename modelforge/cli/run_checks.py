"""CheckBeforeRun (``train``) and CheckEvalBeforeRun (``eval``), Hydra callbacks, check a run's config and directory
after Hydra composes, before it writes there: a refusal leaves nothing behind; a config that passes claims the
directory and reaches the task validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from modelforge.errors import ModelforgeError
from modelforge.train.records import claim_run_dir, forget_claims_for_tasks, refuse, share_run_dir

_validated: list[Any] = []  # the run config on_run_start checked, for this run's task


class CheckBeforeRun(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from modelforge.train.run_config import validate_run_config  # loads Lightning

        HydraConfig.instance().set_config(config)  # as run_job does first: ${hydra:...} resolves
        try:
            run_config = validate_run_config(OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]))
            claim_run_dir(Path(str(OmegaConf.select(config, "hydra.run.dir"))), for_task=True)
        except ModelforgeError as exc:
            refuse(exc)
        _validated[:] = [run_config]


class CheckEvalBeforeRun(Callback):
    """``eval``'s: the checkpoint read and its model rebuilt, the data found and checked against it, before Hydra
    makes the run directory; a refusal leaves nothing behind. A config that passes claims the directory."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from modelforge.train.run import check_eval  # loads Lightning

        HydraConfig.instance().set_config(config)  # as run_job does first: errors name hydra.run.dir
        try:
            share_run_dir(config)
            plan = check_eval(OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]))
            claim_run_dir(Path(str(config.hydra.run.dir)), str(config.hydra.job.name), for_task=True)
        except ModelforgeError as exc:
            refuse(exc)
        _validated[:] = [plan]


def take_validated(cfg: Any) -> Any:
    """The run config ``on_run_start`` validated for this run, else ``cfg`` as given."""
    return _validated.pop() if _validated else cfg


def forget_validated() -> None:
    """Drop a config (and a run directory claim) that no task took: it must not reach the next command."""
    _validated.clear()
    forget_claims_for_tasks()
