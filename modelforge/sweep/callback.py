"""The Hydra callbacks of a sweep: its summary table, and the checks before a sweep starts.

Hydra's basic sweeper re-raises a failed job and skips ``on_multirun_end``, so the summary is rewritten
after every job and the CLI prints the table (:func:`report_unfinished_sweeps`). An Optuna search goes on past
failed trials, and Hydra only warns about a callback's error, so the CLI fails the command (:func:`exit_if_jobs_failed`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # no public API splits a sweep into its jobs
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException, HydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from modelforge.config import check_top_level_keys, train_keys
from modelforge.errors import ConfigError
from modelforge.files.atomic import write_text
from modelforge.files.claim import FileBusyError
from modelforge.files.paths import check_writable
from modelforge.sweep.resume import check_resume
from modelforge.sweep.study import objectives_and_directions, search_settings, storage_file
from modelforge.sweep.summary import (
    METRICS_FILE,
    SUCCEEDED,
    JobRow,
    format_text,
    one_line,
    read_rows,
    swept_overrides,
    write_summary,
)
from modelforge.sweep.trial import trial_of_job
from modelforge.train.records import refuse

log = logging.getLogger(__name__)
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # the _target_ Hydra's config names
OPTUNA_SWEEPER = "hydra_plugins.modelforge_optuna_sweeper.sweeper.OptunaSweeper"
NOT_RUN = "not run"
LOST = "lost"  # a job whose process died without a word (its directory holds no metrics.json)
_SWEEPS: list[SweepSummary] = []  # this process's sweeps, for the CLI once Hydra returns or raises


def register_optuna_sweeper() -> None:
    """Store the Optuna sweeper's config (``hydra/sweeper/modelforge_optuna``) in Hydra's ConfigStore, and its
    class with Hydra's ``Plugins``.

    Hydra 1.3 finds plugins by walking the ``hydra_plugins`` namespace package, and a PEP 660 editable install of
    modelforge (``pip install -e .``) hides our part of it from that walk (Hydra issue #2359; Hydra 1.4 also
    discovers plugins through entry points, #3252). Importing the modules works in every install, and
    ``Plugins.register`` is Hydra's own way to add a plugin its scan missed.
    """
    from hydra.core.plugins import Plugins

    with contextlib.suppress(ImportError):  # modelforge's own files without the plugin: Hydra names what is missing
        importlib.import_module("hydra_plugins.modelforge_optuna_sweeper.config")
        sweeper = importlib.import_module("hydra_plugins.modelforge_optuna_sweeper.sweeper").OptunaSweeper
        Plugins.instance().register(sweeper)


def check_sweep_dir(config: DictConfig) -> None:
    """Raise ConfigError when ``hydra.sweep.dir`` holds a sweep that this one is not continuing (an Optuna
    study stored there, in SQLite or a journal file: its new jobs get new ``<trial>_<launch id>`` directories,
    so no finished record changes)."""
    sweep_dir = Path(config.hydra.sweep.dir)
    check_writable(sweep_dir, "hydra.sweep.dir", folder=True)
    earlier = [p for p in (sweep_dir / "multirun.yaml", sweep_dir / "summary.csv") if p.exists()]
    earlier += sorted(p.parent for p in sweep_dir.glob("*/metrics.json"))
    study = storage_file(str(config.hydra.sweeper.get("storage") or ""))
    if not earlier or study is not None and study.is_file() and study.resolve().parent == sweep_dir.resolve():
        return  # nothing there, or the study it continues
    if _same_study(config, sweep_dir / "multirun.yaml"):
        return  # a worker of a shared study, run again into its own directory
    raise ConfigError("hydra.sweep.dir", f"{sweep_dir} already holds a sweep ({', '.join(p.name for p in earlier[:4])}"
                      f"{', ...' if len(earlier) > 4 else ''}); it is left untouched",
                      hint="pick a new hydra.sweep.dir (or leave it unset); an Optuna search "
                           "(hparams_search=optuna) continues the study stored in its directory, or the shared "
                           "study it searched (the same hydra.sweeper.storage and study_name)")


def _same_study(config: DictConfig, earlier: Path) -> bool:
    """Whether the sweep recorded in ``earlier`` (its multirun.yaml) searched the study ``config`` names."""
    try:
        sweeper = (yaml.safe_load(earlier.read_text()) or {})["hydra"]["sweeper"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return False
    ours = OmegaConf.to_container(config.hydra.sweeper, resolve=False)  # as written, as multirun.yaml holds it
    return config.hydra.sweeper.get("_target_") == OPTUNA_SWEEPER and ours.get("storage") is not None and all(
        sweeper.get(key) == ours.get(key) for key in ("_target_", "storage", "study_name"))


def objectives_of(config: DictConfig) -> list[tuple[str, str]]:
    """An Optuna search's objectives with their directions, its settings checked (ConfigError); [] for other sweepers."""
    if config.hydra.sweeper.get("_target_") != OPTUNA_SWEEPER:
        return []
    settings = search_settings(config.hydra.sweeper, config.get("monitor"), config.hydra.launcher.get("_target_"))
    return list(zip(settings.objectives, settings.directions))


class SweepSummary(Callback):
    """Rewrites ``summary.csv``/``summary.md`` in the sweep dir after every job; prints the table at the end.

    ``resume``: continue the sweep in ``hydra.sweep.dir``, run with the same overrides (:mod:`modelforge.sweep.resume`).
    """

    def __init__(self, resume: bool = False) -> None:
        self.resume = resume

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:  # before the sweeper writes multirun.yaml there, or anything is made
            check_top_level_keys(OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]), train_keys(),
                                 "train")  # what every job would refuse
            check_resume(config) if self.resume else check_sweep_dir(config)
            self.objectives = objectives_of(config)
        except ConfigError as exc:
            refuse(exc)
        self.dir = Path(config.hydra.sweep.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fixed = [str(o) for o in config.hydra.overrides.task]
        self.planned, self.monitor = planned_jobs(config), config.get("monitor")
        # A continued study's jobs are history; a resumed grid's are this sweep's own, run again or kept.
        grid = config.hydra.sweeper.get("_target_") != OPTUNA_SWEEPER
        self.earlier = set() if self.resume and grid else {p.name for p in self.dir.iterdir() if p.is_dir()}
        self.failed: list[str] | None = None  # its failed jobs, once it ends
        _SWEEPS.append(self)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.job_started = time.time()
        if (trial := trial_of_job(config.hydra.job.get("num"))) is not None:  # for whoever finds its worker dead
            trial.set_user_attr("run_dir", str(config.hydra.runtime.output_dir))

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:
            if job_return.status == JobStatus.FAILED:
                record_failure(Path(config.hydra.runtime.output_dir), job_return, self.job_started, self.monitor)
            self.refresh()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        rows = self.report()
        self.failed = [row.job for row in rows if row.status not in SUCCEEDED and
                       row.job.split("/")[0] not in self.earlier]

    def refresh(self, stopped: bool = False) -> list[JobRow]:
        """Rewrite the summary; ``stopped``: with a ``not run`` row for each planned job that never ran."""
        def not_run(rows: list[JobRow]) -> list[JobRow]:
            ran = {row.job.split("_", 1)[0] for row in rows}
            return [JobRow(str(num), {"overrides": job, "monitor": self.monitor, **(
                        {"status": LOST, "error": "its process ended without a record (SIGKILL, out of memory?)"}
                        if (self.dir / str(num)).is_dir() else
                        {"status": NOT_RUN, "error": "never ran: the sweep stopped before it"})})
                    for num, job in enumerate(self.planned or []) if stopped and str(num) not in ran]

        return _write_locked(self.dir, self.fixed, self.objectives, not_run)

    def report(self, stopped: bool = False) -> list[JobRow]:
        """Refresh the summary and print it: the table, where it is, and which jobs failed or never ran."""
        rows = self.refresh(stopped)
        if not rows:  # the sweep failed before its first job
            return rows
        lines = ["", f"sweep summary ({len(rows)} jobs, best first):", format_text(rows, self.fixed, self.objectives),
                 "", f"written: {self.dir / 'summary.csv'} and summary.md"]
        for row, swept in zip(rows, swept_overrides(rows, self.fixed)):
            if row.status not in SUCCEEDED:
                lines.append(f"job {row.job} {row.status} ({' '.join(swept)}): {one_line(row.error) or 'no metrics'}")
        if never := [row.job for row in rows if row.status == NOT_RUN]:
            lines.append(f"the sweep stopped early: job(s) {', '.join(never)} never ran")
        print("\n".join(lines), flush=True)
        return rows


def _write_locked(sweep_dir: Path, fixed: list[str], objectives: list[tuple[str, str]],
                  more: Callable[[list[JobRow]], list[JobRow]] = lambda rows: []) -> list[JobRow]:
    """Rewrite the summary from the jobs' records (and ``more`` rows), one writer at a time: parallel launchers
    (joblib) end jobs in several processes at once, and a worker of a shared study may record another's dead job."""
    with FileLock(sweep_dir / ".summary.lock"):
        rows = read_rows(sweep_dir)
        rows += more(rows)
        write_summary(sweep_dir, rows, fixed, objectives)
    return rows


def rewrite_summary(sweep_dir: Path) -> None:
    """Rewrite the summary of the sweep in ``sweep_dir``, as its own process would, from its multirun.yaml (its
    command line and objectives, read as written) and its jobs' records: a job of it died with its process."""
    try:
        config = yaml.safe_load((sweep_dir / "multirun.yaml").read_text())
        fixed, sweeper = [str(o) for o in config["hydra"]["overrides"]["task"]], config["hydra"]["sweeper"]
        searched = sweeper.get("_target_") == OPTUNA_SWEEPER
        objectives = list(zip(*objectives_and_directions(sweeper, config.get("monitor")))) if searched else []
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError, ConfigError) as exc:
        log.warning("the summary in %s is left as it was: its multirun.yaml cannot be read (%s)", sweep_dir, exc)
        return
    _write_locked(sweep_dir, fixed, objectives)


def planned_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, in job order, as Hydra's basic sweeper will launch them; None for other
    sweepers (Optuna draws its trials as it goes) or overrides that need Hydra's config loader (``glob(*)``)."""
    if config.hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    arguments = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    try:
        overrides = OverridesParser.create().parse_overrides([*arguments, *map(str, config.hydra.overrides.task)])
        return [list(job) for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    except (HydraException, ValueError, TypeError):
        return None


def record_failure(job_dir: Path, job_return: JobReturn, started: float = 0.0, monitor: str | None = None) -> None:
    """Make the failed job's ``metrics.json`` say so, with the error, unless ``train()`` already did (a config
    that fails validation leaves no file, a failure after training one saying "finished"); a file older than
    the job (``started``, a timestamp) is another run's: left alone."""
    path = job_dir / METRICS_FILE
    if path.is_file() and path.stat().st_mtime < started - 1.0:  # file times are coarser than time.time()
        log.warning("job %s failed but %s is an earlier run's; left as is", job_dir.name, path)
        return
    try:
        metrics = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or unreadable
        metrics = {}
    if metrics.get("status") not in (None, "running", "finished") and metrics.get("error"):
        return  # train() recorded how it stopped (failed, diverged, terminated, ...)
    exc = job_return._return_value  # the public `return_value` re-raises it
    if isinstance(exc, CompactHydraException) and exc.__cause__ is not None:
        exc = exc.__cause__  # modelforge.cli.app.SweepJobError wraps the ModelforgeError
    if isinstance(exc, FileBusyError):
        return  # another process runs the job (two resumes of one sweep): its record is that process's to write
    defaults = {"overrides": list(job_return.overrides or []), "run_dir": str(job_dir),
                **({"monitor": monitor} if monitor else {})}
    metrics = {**defaults, **metrics, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    write_text(path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")


def report_unfinished_sweeps() -> None:
    """Print the table of each sweep that Hydra stopped at a failed job, before ``on_multirun_end``."""
    while _SWEEPS:
        if (sweep := _SWEEPS.pop()).failed is None:
            sweep.report(stopped=True)


def exit_if_jobs_failed() -> None:
    """After sweeps that ran to their end: exit 1, naming their failed jobs, if they had any."""
    failed = [sweep for sweep in _SWEEPS if sweep.failed]
    _SWEEPS.clear()
    for sweep in failed:
        print(f"error: {len(sweep.failed)} job(s) of the sweep in {sweep.dir} failed: {', '.join(sweep.failed)} "
              f"(their errors are in the summary above and in summary.csv)", file=sys.stderr)
    if failed:
        raise SystemExit(1)
