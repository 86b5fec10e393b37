"""The sweeper's config (``hydra.sweeper.*``), stored as ``hydra/sweeper/modelforge_optuna``: the one place of its
defaults. What each value may be is checked by :func:`modelforge.sweep.study.search_settings`."""

# No `from __future__ import annotations`: Hydra's plugin scan runs this module before it is in sys.modules, where
# dataclasses would look up string annotations.
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.modelforge_optuna_sweeper.sweeper.OptunaSweeper"
    study_name: str = "modelforge"
    # An SQLAlchemy URL (sqlite:///FILE, postgresql://USER@HOST/DB, mysql+pymysql://...), journal:FILE for
    # Optuna's journal file storage, or null: in memory, gone when the sweep ends.
    storage: Optional[str] = None
    n_trials: int = 20
    n_jobs: int = 1  # trials asked for at once; a parallel launcher runs them together
    max_failure_rate: float = 0.0  # the share of a batch's trials that may fail before the search stops
    # What the search optimizes: numbers in each run's metrics.json (val/acc, params, macs, ...); null: the
    # run's `monitor`. Directions, one per objective; null: minimize losses, params, macs and train_time_s,
    # maximize the rest. `direction` is the same for one objective.
    objectives: Optional[List[str]] = None
    directions: Optional[List[str]] = None
    direction: Optional[str] = None
    sampler: Optional[str] = None  # tpe, random, grid, cmaes, nsgaii; null: tpe, nsgaii for several objectives
    seed: Optional[int] = None
    pruner: str = "none"  # median, successive_halving, hyperband, none
    # A stored study's heartbeat (Optuna's): a running trial's worker records one every heartbeat_interval seconds;
    # a trial without one for grace_period seconds (null: twice the interval) is failed by whichever worker of the
    # study looks next (a killed worker's trial would stay RUNNING), and run again up to retry_stale_trials times.
    heartbeat_interval: Optional[int] = 60
    grace_period: Optional[int] = None
    retry_stale_trials: int = 0
    # Keyword arguments of the Optuna sampler and pruner: +hydra.sweeper.pruner_options.n_warmup_steps=1
    sampler_options: Dict[str, Any] = field(default_factory=dict)
    pruner_options: Dict[str, Any] = field(default_factory=dict)
    # Empty dicts by default, not null: OmegaConf 2.3 cannot merge into a null typed dict (omry/omegaconf#1360), so
    # +hydra.sweeper.conditions.KEY={...} would be a traceback; null stays allowed (older configs write it).
    params: Optional[Dict[str, str]] = field(default_factory=dict)  # the search space, in Hydra's override grammar
    # Conditional keys: {KEY: {OTHER: VALUE or [VALUES]}} draws KEY only where OTHER took one of those values
    conditions: Optional[Dict[str, Any]] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="modelforge_optuna", node=OptunaSweeperConf,
                             provider="modelforge")
