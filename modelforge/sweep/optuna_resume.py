"""Continuing a stored Optuna study without repeating its first trials.

Hydra's Optuna sweeper loads an existing study (``load_if_exists``) and runs
``n_trials`` more. But a seeded sampler starts its random stream afresh, so the
first trials of a continued search would repeat the first trials of the study
(TPE samples its first ``n_startup_trials`` at random). This callback offsets
the sampler seed by the number of trials already stored: a continued search
stays reproducible and explores new points.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

log = logging.getLogger(__name__)
SQLITE_PREFIX = "sqlite:///"


def stored_trials(storage: str | None, study_name: str | None) -> int:
    """How many trials the study already holds (0 when it or its storage does not exist)."""
    if not storage or not study_name:
        return 0
    # Opening a missing SQLite file would create it: look first.
    if storage.startswith(SQLITE_PREFIX) and not Path(storage[len(SQLITE_PREFIX):]).is_file():
        return 0
    import optuna

    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # optuna 2.x: no study of that name in the storage
        return 0
    return len(study.trials)


class ContinueStudy(Callback):
    """Offsets ``hydra.sweeper.sampler.seed`` by the trials already in the stored study."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Runs before Hydra instantiates the sweeper from this same config.
        sweeper = config.hydra.sweeper
        n_done = stored_trials(sweeper.get("storage"), sweeper.get("study_name"))
        if n_done == 0:
            return
        seed = sweeper.sampler.get("seed")
        log.info("continuing Optuna study %r: %d trials stored, %d more to run",
                 sweeper.study_name, n_done, sweeper.n_trials)
        if seed is None:
            return
        with read_write(sweeper.sampler), open_dict(sweeper.sampler):
            sweeper.sampler.seed = int(seed) + n_done
        log.info("sampler seed %d + %d stored trials = %d", seed, n_done, sweeper.sampler.seed)
