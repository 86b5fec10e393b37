"""CheckBeforeRun, a Hydra callback, checks a run's config and directory after Hydra composes, before it writes
there: a refusal leaves nothing behind; a config that passes claims the directory and reaches the task validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from modelforge.errors import ModelforgeError
from modelforge.train.records import claim_run_dir, forget_claims_for_tasks, refuse

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


def take_validated(cfg: Any) -> Any:
    """The run config ``on_run_start`` validated for this run, else ``cfg`` as given."""
    return _validated.pop() if _validated else cfg


def forget_validated() -> None:
    """Drop a config (and a run directory claim) that no task took: it must not reach the next command."""
    _validated.clear()
    forget_claims_for_tasks()
