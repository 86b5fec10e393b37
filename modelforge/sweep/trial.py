"""The Optuna trial of the sweep job running in this process, for the pruning callback (no Optuna, no Lightning here).

Hydra's basic launcher runs each job in the sweeper's own process: the sweeper registers every trial under its job
number (job numbers are trial numbers) around the launch, and the job finds its own through ``hydra.job.num``. DDP
ranks that Lightning starts for a job are processes of their own: :data:`TRIAL_ENV`, which they inherit, tells them
that a trial is on, so that each rank runs the pruning callback and follows rank 0's decision.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

TRIAL_ENV = "MODELFORGE_SWEEP_TRIAL"  # set while trials run in this process: their job numbers
_TRIALS: dict[int, Any] = {}  # job number -> optuna.trial.Trial, while the sweeper launches them here


@contextmanager
def trials_in_process(trials: Mapping[int, Any]) -> Iterator[None]:
    """Make ``trials`` (job number -> trial) reachable by the jobs launched in this process inside the block."""
    saved = os.environ.get(TRIAL_ENV)
    _TRIALS.update(trials)
    os.environ[TRIAL_ENV] = ",".join(map(str, trials))
    try:
        yield
    finally:
        for number in trials:
            _TRIALS.pop(number, None)
        os.environ.pop(TRIAL_ENV, None)
        if saved is not None:
            os.environ[TRIAL_ENV] = saved


def trial_is_on() -> bool:
    """True in a job, or a DDP rank of a job, of an Optuna trial that runs in the sweep's process."""
    return bool(os.environ.get(TRIAL_ENV))


def trial_of_job(number: int | None) -> Any | None:
    """The trial of job ``number`` when it runs in this process (the basic launcher); else None."""
    return _TRIALS.get(number) if number is not None else None
