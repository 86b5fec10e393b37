"""The run config is validated before Hydra creates the run directory (a Hydra callback).

``Hydra.run`` composes the config, calls the callbacks' ``on_run_start``, and only
then (in ``run_job``) writes ``.hydra/`` and the log file in ``hydra.run.dir``. So
a bad value, or a run directory that already holds a run, is claimed by another
run or cannot be written, is refused here and leaves no directory behind and no
earlier file changed. A config that passes claims the run directory here, atomically
(:func:`modelforge.train.records.claim_run_dir`). The validated config and the claim
are handed to the task, which neither validates nor claims again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from modelforge.errors import ModelforgeError


class ConfigRefused(SystemExit):
    """Raised from a Hydra callback, whose ``Exception``s Hydra turns into warnings; exit code 2."""

    def __init__(self, error: ModelforgeError) -> None:
        super().__init__(getattr(error, "exit_code", 2))  # e.g. a full disk is 1, a bad value 2
        self.error = error


_validated: list[Any] = []  # the run config checked by on_run_start, for the task of this run


class CheckBeforeRun(Callback):
    """``on_run_start``: validate the run config and the run directory (single runs; sweep jobs check their own)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from modelforge.train.records import claim_run_dir
        from modelforge.train.run_config import validate_run_config

        # As run_job does first thing: lets ${hydra:...} in the task config resolve.
        HydraConfig.instance().set_config(config)
        try:
            task_cfg = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
            run_config = validate_run_config(task_cfg)
            # Atomic: of two runs started together into one directory, one gets it; train() takes it over.
            claim_run_dir(Path(str(OmegaConf.select(config, "hydra.run.dir"))), for_task=True)
        except ModelforgeError as exc:
            raise ConfigRefused(exc) from None
        _validated[:] = [run_config]


def take_validated(cfg: Any) -> Any:
    """The run config ``on_run_start`` validated for this run, else ``cfg`` as given."""
    return _validated.pop() if _validated else cfg


def forget_validated() -> None:
    """Drop a config (and a run directory claim) that no task took: it must not reach the next command."""
    from modelforge.train.records import forget_claims_for_tasks

    _validated.clear()
    forget_claims_for_tasks()
