"""A Hydra callback that keeps a sweep's ``summary.csv``/``summary.md`` current.

Hydra's basic sweeper re-raises the first failed job after its batch, so
``on_multirun_end`` never runs for such a sweep. The summary is therefore rewritten
after every job (``on_job_end``), and the table is printed either by
``on_multirun_end`` or, after a failed sweep, by :func:`report_unfinished_sweeps`
(called by the CLI). A sweeper that goes on past failed trials (Optuna, with
``max_failure_rate``) does reach ``on_multirun_end``; Hydra only warns about an
exception raised there, so the failed jobs are kept for the CLI, which then fails the
command naming them (:func:`exit_if_jobs_failed`).

Enable it in a config's hydra section::

    hydra:
      callbacks:
        sweep_summary:
          _target_: modelforge.sweep.callback.SweepSummary
"""

from __future__ import annotations

import fcntl
import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from modelforge.errors import ConfigError
from modelforge.sweep.planned import NOT_RUN, not_run_rows, planned_jobs
from modelforge.sweep.summary import (
    METRICS_FILE,
    JobRow,
    format_text,
    one_line,
    swept_overrides,
    write_summary,
)
from modelforge.train.records import check_sweep_dir, refuse, write_text

log = logging.getLogger(__name__)

# Sweeps of this process that started and have not ended (with their fixed overrides):
# the CLI reports them after a failure.
_UNFINISHED: dict[Path, list[str]] = {}
# Each sweep's planned jobs (grid sweeps only) and monitored metric.
_PLANNED: dict[Path, tuple[list[list[str]] | None, str | None]] = {}
# Failed jobs of sweeps that still ran to their end: the CLI exits non-zero on them.
_FAILED_JOBS: dict[Path, list[str]] = {}


@contextmanager
def _locked(sweep_dir: Path) -> Iterator[None]:
    # Parallel launchers (joblib) end jobs in several processes at once: one writer at a time.
    with open(sweep_dir / ".summary.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def refresh_summary(sweep_dir: str | Path, fixed: Sequence[str] | None = None,
                    stopped: bool = False) -> list[JobRow]:
    """Rewrite the sweep's summary files from the jobs' ``metrics.json`` files.

    ``stopped``: the sweep ended early; its planned jobs that never ran get a ``not run`` row.
    """
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    planned, monitor = _PLANNED.get(sweep_dir, (None, None))
    extra = (lambda rows: not_run_rows(planned, rows, monitor)) if stopped else None
    with _locked(sweep_dir):
        return write_summary(sweep_dir, fixed, extra)


def record_failure(job_dir: Path, job_return: JobReturn, started: float = 0.0, monitor: str | None = None) -> None:
    """Make sure a failed job's ``metrics.json`` says so, with the error.

    ``train()`` writes one for failures during training; a config that fails validation
    fails before that, and a failure after training (e.g. no monitored metric) leaves a
    file saying "finished". The error comes from the job's return value: the exception.
    A file older than the job (``started``, a timestamp) is another run's and is kept.
    """
    path = job_dir / METRICS_FILE
    metrics: dict[str, Any] = {}
    if path.is_file():
        if path.stat().st_mtime < started - 1.0:  # file times are coarser than time.time()
            log.warning("job %s failed but %s is an earlier run's; left as is", job_dir.name, path)
            return
        try:
            metrics = json.loads(path.read_text())
        except ValueError:
            metrics = {}
    if metrics.get("status") not in (None, "running", "finished") and metrics.get("error"):
        return  # train() recorded how it stopped (failed, diverged, terminated, ...)
    exc = job_return._return_value  # the public `return_value` re-raises it
    if isinstance(exc, CompactHydraException) and exc.__cause__ is not None:
        exc = exc.__cause__  # hydra_app's SweepJobError wraps the ModelforgeError
    metrics.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    metrics.setdefault("overrides", list(job_return.overrides or []))
    metrics.setdefault("run_dir", str(job_dir))
    if monitor:
        metrics.setdefault("monitor", monitor)
    job_dir.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")


def print_summary(sweep_dir: Path, rows: list[JobRow], fixed: Sequence[str] | None = None) -> None:
    """The table of jobs, where its files are, and which jobs failed."""
    lines = ["", f"sweep summary ({len(rows)} jobs, best first):", format_text(rows, fixed), "",
             f"written: {sweep_dir / 'summary.csv'} and summary.md"]
    for row, swept in zip(rows, swept_overrides(rows, fixed)):
        if row.status != "finished":
            lines.append(f"job {row.job} {row.status} ({' '.join(swept)}): {one_line(row.error) or 'no metrics'}")
    never = [row.job for row in rows if row.status == NOT_RUN]
    if never:
        lines.append(f"the sweep stopped early: job(s) {', '.join(never)} never ran")
    print("\n".join(lines), flush=True)


def report_unfinished_sweeps() -> None:
    """Print the summary of sweeps that a failed job stopped before ``on_multirun_end``."""
    while _UNFINISHED:
        sweep_dir, fixed = _UNFINISHED.popitem()
        rows = refresh_summary(sweep_dir, fixed, stopped=True)
        if rows:  # nothing to show when the sweep failed before its first job
            print_summary(sweep_dir, rows, fixed)


def exit_if_jobs_failed() -> None:
    """After a sweep that ran to its end: exit 1, naming its failed jobs, if it had any."""
    if not _FAILED_JOBS:
        return
    for sweep_dir, jobs in _FAILED_JOBS.items():
        print(f"error: {len(jobs)} job(s) of the sweep in {sweep_dir} failed: {', '.join(jobs)} "
              f"(their errors are in the summary above and in summary.csv)", file=sys.stderr)
    _FAILED_JOBS.clear()
    raise SystemExit(1)


class SweepSummary(Callback):
    """Writes ``summary.csv``/``summary.md`` in the sweep directory after every job."""

    def __init__(self) -> None:
        self.fixed: list[str] | None = None  # the sweep's command-line overrides
        self.job_started = 0.0
        self.failed: list[str] = []  # job directory names of this sweep's failed jobs

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:  # before the sweeper writes multirun.yaml there
            check_sweep_dir(config)
        except ConfigError as exc:
            refuse(exc)
        # The Optuna sweeper opens its SQLite study in the sweep dir before any job made it.
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self.fixed = [str(o) for o in config.hydra.overrides.task]
        self.failed = []
        _UNFINISHED[sweep_dir] = self.fixed
        _PLANNED[sweep_dir] = (planned_jobs(config), config.get("monitor"))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.job_started = time.time()

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        if job_return.status == JobStatus.FAILED:
            record_failure(Path(config.hydra.runtime.output_dir), job_return, self.job_started,
                           monitor=config.get("monitor"))
            self.failed.append(Path(config.hydra.runtime.output_dir).name)
        refresh_summary(config.hydra.sweep.dir, self.fixed)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        _UNFINISHED.pop(sweep_dir, None)
        print_summary(sweep_dir, refresh_summary(sweep_dir, self.fixed), self.fixed)
        if self.failed:  # only this run's jobs: a continued study's earlier failures are history
            _FAILED_JOBS[sweep_dir] = list(self.failed)
