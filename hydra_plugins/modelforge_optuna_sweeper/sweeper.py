"""The Hydra Sweeper: Hydra's side of an Optuna search (its launcher, its config checks); the search is
:class:`modelforge.sweep.search.OptunaSearch`."""

from __future__ import annotations

from typing import Any, List, Optional

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaSweeper(Sweeper):
    """Runs ``n_trials`` trials of an Optuna study, each a job of Hydra's launcher (see the config's fields)."""

    def __init__(self, **options: Any) -> None:  # the fields of OptunaSweeperConf, which holds their defaults
        self.options = options
        self.search: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        from modelforge.sweep.search import OptunaSearch

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=hydra_context,
                                                                task_function=task_function)
        self.search = OptunaSearch(self.options, config, self.launcher, self.validate_batch_is_legal)

    def sweep(self, arguments: List[str]) -> Optional[Any]:
        return self.search.run(arguments)
