"""A trial whose worker died (SIGKILL, a lost machine) is failed, not left RUNNING in a stored study forever.

This is Optuna's heartbeat: while a trial runs, its worker records a heartbeat every ``heartbeat_interval`` seconds,
and any worker of the study fails the trials whose last heartbeat is older than ``grace_period``
(``optuna.storages.fail_stale_trials``), then runs the storage's stale-trial callback on each.
``Study.optimize`` does both itself; an ask-and-tell loop such as the search's calls Optuna's pieces: the heartbeat
thread around each launch, and ``fail_stale_trials`` when a search starts, before each batch and at its end.

Optuna's RDBStorage keeps heartbeats (by the database server's clock); its JournalStorage has none in Optuna 5:
:class:`HeartbeatJournalStorage` records them in the journal, as a trial system attribute, by each worker's clock
(machines sharing a journal need clocks closer than the grace period).

A failed stale trial is recorded as a failed job: ``metrics.json`` in its job directory says why, and that
sweep's summary is rewritten; ``retry_stale_trials`` runs its parameters again (RetryHeartbeatStaleTrialCallback).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat, get_heartbeat_thread
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import FrozenTrial, Trial, TrialState

from modelforge.files.atomic import write_json
from modelforge.sweep.study import SearchSettings
from modelforge.sweep.summary import METRICS_FILE

log = logging.getLogger(__name__)
HEARTBEAT_ATTR = "modelforge:heartbeat"  # a journal trial's last heartbeat: seconds since the epoch, its worker's clock
_ASK_WARNING = "Heartbeat of storage is supposed to be used with Study.optimize"  # what Study.ask says of ask-and-tell


@dataclass(frozen=True)
class Heartbeat:
    """``hydra.sweeper.heartbeat_interval``, ``grace_period`` (None: twice the interval, Optuna's default) and
    ``retry_stale_trials``, checked."""

    interval: int
    grace_period: int | None = None
    retries: int = 0

    @property
    def grace(self) -> int:
        return self.grace_period if self.grace_period is not None else 2 * self.interval

    def rdb_options(self) -> dict[str, Any]:
        """RDBStorage's keyword arguments for this heartbeat."""
        return {"heartbeat_interval": self.interval, "grace_period": self.grace,
                "heartbeat_stale_trial_callback": StaleTrialRecord(self)}

    def journal(self, path: Path) -> HeartbeatJournalStorage:
        return HeartbeatJournalStorage(JournalFileBackend(str(path)), self)


def heartbeat_of(settings: SearchSettings) -> Heartbeat | None:
    """The heartbeat a search's study keeps; None for a study in memory, or with ``heartbeat_interval: null``."""
    if settings.storage is None or settings.heartbeat_interval is None:
        return None
    return Heartbeat(settings.heartbeat_interval, settings.grace_period, settings.retry_stale_trials)


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """A journal storage with Optuna's heartbeat: each heartbeat is one journal line."""

    def __init__(self, backend: JournalFileBackend, heartbeat: Heartbeat) -> None:
        super().__init__(backend)
        self.heartbeat = heartbeat
        self.stale_trial_callback = StaleTrialRecord(heartbeat)

    def record_heartbeat(self, trial_id: int) -> None:
        with contextlib.suppress(UpdateFinishedTrialError):  # another worker failed it meanwhile: nothing to keep alive
            self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        return [t._trial_id for t in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
                if now - t.system_attrs.get(HEARTBEAT_ATTR, now) > self.heartbeat.grace]

    def get_heartbeat_interval(self) -> int | None:
        return self.heartbeat.interval

    def get_heartbeat_stale_trial_callback(self) -> Any:
        return self.stale_trial_callback


class StaleTrialRecord:
    """Run on each trial that ``fail_stale_trials`` failed: say so, record it as a failed job where its job directory
    is known (``run_dir``, recorded when its job started), and retry it if asked."""

    def __init__(self, heartbeat: Heartbeat) -> None:
        self.heartbeat = heartbeat

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        why = (f"its worker stopped without a word: no heartbeat for over {self.heartbeat.grace} s "
               "(killed, or its machine lost); Optuna's heartbeat failed the trial")
        run_dir = trial.user_attrs.get("run_dir")
        log.warning("trial %d failed: %s%s", trial.number, why, f" ({run_dir})" if run_dir else "")
        if run_dir and Path(run_dir).is_dir():
            record_dead_job(Path(run_dir), trial.number, why)
        if self.heartbeat.retries > 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                RetryHeartbeatStaleTrialCallback(max_retry=self.heartbeat.retries)(study, trial)


def record_dead_job(job_dir: Path, number: int, why: str) -> None:
    """``metrics.json`` of a job whose process died before it could write one (or one that still says running),
    and the summary of its sweep rewritten."""
    from modelforge.sweep.callback import rewrite_summary  # Hydra's callbacks: imported when a trial died

    path = job_dir / METRICS_FILE
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if json.loads(path.read_text()).get("status") not in (None, "running"):
            return  # the job said how it ended
    overrides = []
    with contextlib.suppress(OSError, yaml.YAMLError):
        overrides = [str(o) for o in yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []]
    write_json(path, {"status": "failed", "error": f"WorkerLost: {why}", "trial": number, "overrides": overrides,
                      "run_dir": str(job_dir)})
    if (sweep_dir := next((p for p in job_dir.parents if (p / "multirun.yaml").is_file()), None)) is not None:
        rewrite_summary(sweep_dir)


def fail_dead_jobs(study: optuna.Study, sweep_dir: Path, retries: int) -> None:
    """On a sweep's resume: fail at once each RUNNING trial whose job ran in ``sweep_dir`` and that no process runs
    now (its worker died with the sweep), as ``fail_stale_trials`` would after the grace period, and retry it up to
    ``retries`` times as Optuna's RetryFailedTrialCallback does. Trials whose job directory is not known yet (another
    launcher's, recorded when they end) are left to the heartbeat."""
    from modelforge.sweep.resume import job_is_held  # Hydra's side: imported when a sweep resumes

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        run_dir = Path(str(trial.user_attrs.get("run_dir") or ""))
        if not trial.user_attrs.get("run_dir") or sweep_dir.resolve() not in run_dir.resolve().parents \
                or job_is_held(run_dir):
            continue
        try:
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        except UpdateFinishedTrialError:  # its worker told it meanwhile
            continue
        why = "its sweep's process died while it ran (found when the sweep resumed: no process runs its job)"
        log.warning("trial %d failed: %s (%s)", trial.number, why, run_dir)
        record_dead_job(run_dir, trial.number, why)
        if retries > 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                RetryHeartbeatStaleTrialCallback(max_retry=retries)(study, study._storage.get_trial(trial._trial_id))


def fail_stale_trials(study: optuna.Study) -> None:
    """Optuna's ``fail_stale_trials`` (experimental, hence quiet): trials without a heartbeat for the grace period
    become FAIL, each recorded by :class:`StaleTrialRecord`. Nothing for storages without a heartbeat."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def ask(study: optuna.Study, fixed_distributions: dict[str, Any] | None = None) -> Trial:
    """``study.ask``, without its warning that heartbeats are for ``Study.optimize``: the search keeps them itself."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_ASK_WARNING)
        return study.ask(fixed_distributions)


@contextlib.contextmanager
def beating(study: optuna.Study, trials: Sequence[Trial]) -> Iterator[None]:
    """Record the heartbeat of ``trials`` while they run, as ``Study.optimize`` does around its objective (Optuna
    starts this thread only there: optuna.storages._heartbeat is its one way in)."""
    with contextlib.ExitStack() as stack:
        for trial in trials:
            stack.enter_context(get_heartbeat_thread(trial._trial_id, study._storage))
        yield
