"""An Optuna search run as a Hydra sweep: Optuna asks for a trial, Hydra's launcher runs it as a job, and the job's
``metrics.json`` says how it ended (finished, pruned, failed) and holds the objectives' values.

Job numbers are trial numbers: a job's directory (``<trial>_<launch id>``) names its trial, whether the study is
continued or shared by several processes (each asks its own trials of the stored study, so no trial runs twice).
A seeded sampler is seeded anew before each trial from ``(seed, trials stored)`` (:func:`trial_seed`): a continued
or shared study draws new points, the same study grows the same way from the same seed, and workers of one shared
study given other seeds draw apart (the grid sampler keeps its seed: it fixes the order of the grid).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf
from optuna.trial import Trial, TrialState

from modelforge.config import to_plain
from modelforge.errors import ConfigError
from modelforge.files.atomic import write_text, write_yaml
from modelforge.sweep import heartbeat, search_space
from modelforge.sweep.plots import plot_study
from modelforge.sweep.resume import resume_asked
from modelforge.sweep.study import (
    BASIC_LAUNCHER,
    SWEEPER,
    SearchSettings,
    open_storage,
    search_settings,
    shown_url,
)
from modelforge.sweep.summary import METRICS_FILE
from modelforge.sweep.trial import trials_in_process

log = logging.getLogger(__name__)
RESULTS_FILE = "optimization_results.yaml"


def trial_seed(seed: int, stored: int) -> int:
    """The sampler's seed for the trial asked after ``stored`` trials: mixed, not ``seed + stored``, under which
    workers seeded 0 and 1 of one shared study would reseed alike, one trial apart, and draw the same points."""
    return int(np.random.SeedSequence([seed, stored]).generate_state(1)[0])


class OptunaSearch:
    """The ask-launch-tell loop of one sweep; ``validate_batch`` composes each job's config before it is launched."""

    def __init__(self, options: Mapping[str, Any], config: DictConfig, launcher: Launcher,
                 validate_batch: Callable[[Sequence[Sequence[str]]], None]) -> None:
        optuna.logging.disable_default_handler()  # Optuna's lines through Hydra's handlers, without colour codes
        optuna.logging.enable_propagation()
        launcher_target = (config.hydra.get("launcher") or {}).get("_target_")
        self.settings: SearchSettings = search_settings(options, config.get("monitor"), launcher_target)
        self.n_trials, self.n_jobs = int(options["n_trials"]), int(options["n_jobs"])
        self.max_failure_rate = float(options["max_failure_rate"])
        self.params = dict(options.get("params") or {})
        self.raw_conditions = to_plain(options.get("conditions"))
        self.config, self.launcher, self.validate_batch = config, launcher, validate_batch
        self.sweep_dir = Path(config.hydra.sweep.dir)
        # Where the trial reaches the run (in this process) it reports there: Optuna takes intermediate values
        # of single-objective studies only.
        self.reporting = launcher_target in (None, BASIC_LAUNCHER) and len(self.settings.objectives) == 1
        self.grid: dict[str, list[Any]] | None = None
        self.grid_done = False

    def run(self, arguments: Sequence[str]) -> list[Sequence[JobReturn]]:
        space, fixed = search_space.parse_space([*(f"{k}={v}" for k, v in self.params.items()), *arguments])
        conditions = search_space.parse_conditions(self.raw_conditions, space, fixed)
        if conditions and self.settings.sampler == "grid":
            raise ConfigError(search_space.CONDITIONS_PATH, "the grid sampler draws every key in every trial",
                              hint="pick another hydra.sweeper.sampler (tpe, random), or search without conditions")
        self.grid = search_space.grid(space) if self.settings.sampler == "grid" else None
        study = self._open_study()
        _check_stored_space(study, space)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        write_text(self.sweep_dir / "multirun.yaml", OmegaConf.to_yaml(self.config))
        returns: list[Sequence[JobReturn]] = []
        remaining = self._trials_to_run(study)
        if resume_asked(self.config.hydra):  # the study continues to its n_trials, a dead job's trial failed first
            heartbeat.fail_dead_jobs(study, self.sweep_dir, self.settings.retry_stale_trials)
            run = sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))
            log.info("resume: %d of the study's %d trials have run (or run now); %d to run", run, self.n_trials,
                     max(self.n_trials - run, 0))
            remaining = min(remaining, max(self.n_trials - run, 0))
        while remaining > 0 and not self.grid_done:
            heartbeat.fail_stale_trials(study)  # a dead worker's, before the sampler reads the study
            trials = [self._ask(study, space, conditions, fixed) for _ in range(min(self.n_jobs, remaining))]
            with _failed_if_unfinished(study, trials):
                with heartbeat.beating(study, trials):  # while they run, not once they are told
                    batch = [search_space.job_overrides(trial.params, fixed) for trial in trials]
                    self.validate_batch(batch)
                    results = self._launch(trials, batch)
                failed = self._tell(study, trials, results)
            returns.append(results)
            remaining -= len(trials)
            if failed / len(trials) > self.max_failure_rate:
                log.error("the search stops: %d of %d trial(s) of the last batch failed (hydra.sweeper.max_failure_rate"
                          "=%s); %d trial(s) not run", failed, len(trials), self.max_failure_rate, remaining)
                break
        self._report(study)
        return returns

    def _open_study(self) -> optuna.Study:
        settings = self.settings
        where = shown_url(settings.storage) if settings.storage else "memory"
        try:
            storage = open_storage(settings.storage, heartbeat=heartbeat.heartbeat_of(settings))
            study = optuna.create_study(storage=storage, study_name=settings.study_name,
                                        directions=list(settings.directions), load_if_exists=True,
                                        sampler=settings.make_sampler(settings.seed, self.grid),
                                        pruner=settings.make_pruner())
        except ValueError as exc:  # a stored study of other directions
            raise ConfigError(f"{SWEEPER}.directions", f"study {settings.study_name!r} in {where}: {exc}") from None
        heartbeat.fail_stale_trials(study)
        if stored := study.get_trials(deepcopy=False):
            running = sum(t.state == TrialState.RUNNING for t in stored)  # another process's, in a shared study
            log.info("continuing Optuna study %r: %d trials stored%s, %d more to run (%s)", settings.study_name,
                     len(stored), f" ({running} running)" if running else "", self.n_trials, where)
        goals = ", ".join(f"{d} {o}" for o, d in zip(settings.objectives, settings.directions))
        log.info("study %r in %s: %s, sampler %s (seed %s), pruner %s", settings.study_name, where, goals,
                 settings.sampler, settings.seed, settings.pruner)
        return study

    def _trials_to_run(self, study: optuna.Study) -> int:
        if self.grid is None:
            return self.n_trials
        points = math.prod(len(values) for values in self.grid.values())
        visited = sum("grid_id" in t.system_attrs for t in study.get_trials(deepcopy=False))
        left = min(self.n_trials, max(points - visited, 0))
        if left < self.n_trials:
            log.info("grid sampler: %d of the grid's %d points left to run; %d trial(s)", points - visited, points, left)
        return left

    def _ask(self, study: optuna.Study, space: dict[str, Any], conditions: search_space.Conditions,
             fixed: Sequence[str]) -> Trial:
        # Not the grid sampler: its seed shuffles the grid, which must stay one order.
        if self.settings.seed is not None and self.grid is None:
            stored = len(study.get_trials(deepcopy=False))
            study.sampler = self.settings.make_sampler(trial_seed(self.settings.seed, stored), self.grid)
        if not conditions:
            return heartbeat.ask(study, space)
        trial = heartbeat.ask(study)
        search_space.sample(trial, space, conditions, fixed)
        return trial

    def _launch(self, trials: Sequence[Trial], batch: Sequence[Sequence[str]]) -> list[JobReturn]:
        """Launch the jobs, each numbered as its trial (a run of consecutive numbers per launch); jobs that run in
        this process get their trial, to report to (and be pruned)."""
        returns: list[JobReturn] = []
        start = 0
        for first, last in _consecutive([trial.number for trial in trials]):
            group, jobs = trials[start:start + last - first + 1], batch[start:start + last - first + 1]
            with trials_in_process({trial.number: trial for trial in group} if self.reporting else {}):
                returns.extend(self.launcher.launch(jobs, initial_job_idx=first))
            start += len(group)
        return returns

    def _tell(self, study: optuna.Study, trials: Sequence[Trial], results: Sequence[JobReturn]) -> int:
        """Tell Optuna how each trial ended; return how many failed."""
        failed = 0
        for trial, result in zip(trials, results):
            state, values, why = self._outcome(result)
            if _finished(study, trial):  # failed by another worker, which heard no heartbeat from this one in time
                log.warning("trial %d ended here as %s, but another worker of the study had failed it: no heartbeat "
                            "reached the storage within hydra.sweeper.grace_period; its run's records stay as written",
                            trial.number, state.name.lower())
                failed += 1
                continue
            if result.hydra_cfg is not None:
                trial.set_user_attr("run_dir", str(result.hydra_cfg.hydra.runtime.output_dir))
            if why:
                log.warning("trial %d failed: %s", trial.number, why)
            else:
                shown = ", ".join(f"{n} {_number(v)}" for n, v in zip(self.settings.objectives, values or []))
                log.info("trial %d %s%s", trial.number, state.name.lower(), f": {shown}" if shown else "")
            failed += state == TrialState.FAIL
            try:
                study.tell(trial, state=state, values=values)
            except RuntimeError:  # the grid sampler stops a study whose grid has run, and only optimize() may
                if self.grid is None:
                    raise
                self.grid_done = True
        return failed

    def _outcome(self, result: JobReturn) -> tuple[TrialState, list[float] | None, str | None]:
        """A job's state for Optuna, its objective values, and why it failed."""
        if result.status != JobStatus.COMPLETED:
            error = result._return_value  # the public `return_value` re-raises it
            return TrialState.FAIL, None, f"{type(error).__name__}: {error}".splitlines()[0]
        path = Path(result.hydra_cfg.hydra.runtime.output_dir) / METRICS_FILE
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return TrialState.FAIL, None, f"{path}: {exc}"
        if metrics.get("status") == "pruned":
            return TrialState.PRUNED, None, None
        if metrics.get("status") != "finished":
            return TrialState.FAIL, None, f"{path} says status {metrics.get('status')!r}"
        values = []
        for name in self.settings.objectives:
            value = metrics.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                numeric = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
                raise ConfigError(f"{SWEEPER}.objectives", f"the runs record no number {name!r} ({path})",
                                  allowed=numeric)
            if not math.isfinite(value):
                return TrialState.FAIL, None, f"{name} is {value}"
            values.append(float(value))
        return TrialState.COMPLETE, values, None

    def _report(self, study: optuna.Study) -> None:
        """Log the best trial(s), write them to optimization_results.yaml, and draw the study's plots."""
        settings = self.settings
        heartbeat.fail_stale_trials(study)
        best = study.best_trials  # the Pareto front; the best trial for one objective
        if not best:
            log.error("no trial of study %r has completed (%d stored): it has no best value yet",
                      settings.study_name, len(study.get_trials(deepcopy=False)))
            return
        results: dict[str, Any] = {"name": "optuna", "study_name": settings.study_name,
                                   "storage": shown_url(settings.storage) if settings.storage else None,
                                   "objectives": dict(zip(settings.objectives, settings.directions))}
        solutions = [{"trial": t.number, "values": dict(zip(settings.objectives, t.values)), "params": t.params,
                      "run_dir": t.user_attrs.get("run_dir")} for t in sorted(best, key=lambda t: t.number)]
        if len(settings.objectives) == 1:
            (solution,) = [s for s in solutions if s["trial"] == study.best_trial.number]
            results.update(best_trial=solution["trial"], best_value=study.best_value, best_params=solution["params"],
                           best_run_dir=solution["run_dir"])
            log.info("best trial %d: %s %.4f, %s", solution["trial"], settings.objectives[0], study.best_value,
                     " ".join(f"{k}={v}" for k, v in solution["params"].items()))
        else:
            results["pareto_front"] = solutions
            log.info("Pareto front of %s: trials %s", " / ".join(settings.objectives),
                     ", ".join(str(s["trial"]) for s in solutions))
        write_yaml(self.sweep_dir / RESULTS_FILE, results)
        if pictures := plot_study(study, settings.objectives, self.sweep_dir):
            log.info("plots: %s", ", ".join(str(p.absolute()) for p in pictures))


def _check_stored_space(study: optuna.Study, space: Mapping[str, Any]) -> None:
    """A continued (or shared) study keeps its search space: Optuna refuses other choices for a stored key."""
    from optuna.distributions import check_distribution_compatibility

    checked: set[str] = set()
    for trial in study.get_trials(deepcopy=False):
        for key, stored in trial.distributions.items():
            if key in space and key not in checked:
                checked.add(key)
                try:
                    check_distribution_compatibility(stored, space[key])
                except ValueError as exc:
                    raise ConfigError(f"{search_space.SPACE_PATH}.{key}", f"study {study.study_name!r} searched it as "
                                      f"{stored}, this search as {space[key]}: {exc}",
                                      hint="keep the stored search space, or start a new study (a new "
                                           "hydra.sweep.dir, or hydra.sweeper.study_name)") from None


def _finished(study: optuna.Study, trial: Trial) -> bool:
    """Whether ``trial`` is no longer running in the study (``fail_stale_trials`` of another worker failed it)."""
    return study._storage.get_trial(trial._trial_id).state.is_finished()


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"  # params 421,834; val/acc 0.9712


def _consecutive(numbers: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Runs of consecutive numbers, as (first, last)."""
    start = 0
    for i in range(1, len(numbers) + 1):
        if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
            yield numbers[start], numbers[i - 1]
            start = i


@contextmanager
def _failed_if_unfinished(study: optuna.Study, trials: Sequence[Trial]) -> Iterator[None]:
    """Trials left running when the batch stops on an exception (a signal, a bad config) are told FAIL: in a stored
    study, a trial left RUNNING looks to other processes like work under way."""
    try:
        yield
    except BaseException:
        for trial in trials:
            try:
                study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            except Exception:  # noqa: BLE001 - the storage may be what failed; the first error is the one to see
                log.debug("could not mark trial %d failed", trial.number, exc_info=True)
        raise
