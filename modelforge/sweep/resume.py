"""Resuming a sweep in its own directory: the same ``train -m`` command with ``hydra.sweep.dir=DIR`` and
``hydra.callbacks.sweep_summary.resume=true``.

Every job of a sweep holds its directory while it runs (a ``flock``, which the kernel releases when its process
dies, SIGKILL included), so two resumes of one sweep never run one job twice, whatever the launcher. Resumed, each
job keeps its number and its directory: one that finished is kept as it is (its record, its value for the sweeper);
one stopped from outside (SIGTERM, a killed process) continues from its ``interrupted.ckpt``, or the ``last.ckpt``
of its last whole epoch, as ``ckpt_path=`` resumes a single run; one that failed runs again; one that never
started runs. The files of the attempt before move to ``.attempts/N/`` in the job's directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from modelforge.errors import ConfigError, ModelforgeError
from modelforge.files.claim import FileBusyError, claimed
from modelforge.sweep.summary import METRICS_FILE, SUCCEEDED

log = logging.getLogger(__name__)
RESUME_KEY = "hydra.callbacks.sweep_summary.resume"  # SweepSummary's own option: Hydra's config has no other place
ATTEMPTS = ".attempts"  # a resumed job's earlier attempts, hidden from the summary
JOB_CLAIM = "sweep_job"  # held as .sweep_job.lock in the job's directory while the job runs
_KEPT = {".hydra", "train.log", f".{JOB_CLAIM}.lock", ATTEMPTS}  # what Hydra wrote for this attempt, and history
_STOPPED = ("terminated", "interrupted", "running", None)  # stopped from outside: the run's state continues
_CHECKPOINTS = ("interrupted.ckpt", "last.ckpt")  # modelforge.train.checkpoints' names, first found first


def resume_asked(hydra: DictConfig) -> bool:
    """Whether the sweep whose Hydra config (the ``hydra`` node) is ``hydra`` is a resume."""
    return bool(OmegaConf.select(hydra, RESUME_KEY.removeprefix("hydra."), default=False))


def check_resume(config: DictConfig) -> None:
    """Raise ConfigError unless ``hydra.sweep.dir`` holds a sweep whose overrides are this command's."""
    sweep_dir = Path(config.hydra.sweep.dir)
    recorded = sweep_dir / "multirun.yaml"
    if not recorded.is_file():
        raise ConfigError(RESUME_KEY, f"{sweep_dir} holds no sweep to resume (no multirun.yaml there): give the "
                                      "sweep's own directory, hydra.sweep.dir=DIR")
    try:
        before = [str(o) for o in yaml.safe_load(recorded.read_text())["hydra"]["overrides"]["task"]]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise ConfigError(RESUME_KEY, f"{recorded} cannot be read ({exc}): its sweep cannot be resumed") from None
    now = [str(o) for o in config.hydra.overrides.task]
    if now != before:
        raise ConfigError(RESUME_KEY, f"a resume runs the sweep's own overrides: {override_difference(before, now)}"
                                      f" (the sweep in {sweep_dir} ran: {' '.join(before) or 'none'})")


def override_difference(before: Sequence[str], now: Sequence[str]) -> str:
    """What ``now`` (a command's overrides) adds to and lacks of ``before``, in a few words."""
    added = [o for o in now if o not in before]
    missing = [o for o in before if o not in now]
    if not added and not missing:
        return "the same overrides in another order, which numbers the jobs otherwise"
    return "; ".join([*(f"this command adds {' '.join(added)}" for _ in added[:1]),
                      *(f"lacks {' '.join(missing)}" for _ in missing[:1])])


def resume_hint(sweep_dir: str | Path) -> str:
    """How to resume the sweep in ``sweep_dir`` (its ``hydra.sweep.dir``), for a job that stopped it."""
    return f"the same command and hydra.sweep.dir={sweep_dir} {RESUME_KEY}=true"


@contextmanager
def held_job(cfg: DictConfig, hydra: DictConfig) -> Iterator[dict[str, Any] | None]:
    """Hold this sweep job's directory while the block runs (FileBusyError: another process runs the job).
    ``hydra``: the job's Hydra config (its output dir, number and callbacks), which the CLI hands in.

    Resuming, the directory is made ready first; yields the record of a job that finished before (kept: run
    nothing), else None: run the job (``cfg.ckpt_path`` set where it continues a stopped run).
    """
    job_dir = Path(hydra.runtime.output_dir)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(claimed(job_dir / JOB_CLAIM, what=f"sweep job {hydra.job.num}", key="hydra.sweep.dir"))
        except FileBusyError:  # its message is an export's
            raise FileBusyError(f"hydra.sweep.dir: job {hydra.job.num} ({job_dir}) is run by another process: another "
                                "resume of this sweep runs the job; the summary lists it when it ends") from None
        yield continue_job(job_dir, cfg) if resume_asked(hydra) else None


def job_is_held(job_dir: Path) -> bool:
    """Whether a process runs the sweep job in ``job_dir`` now (holds it: :func:`held_job`)."""
    try:
        with claimed(job_dir / JOB_CLAIM, what="a look"):
            return False
    except FileBusyError:
        return True


def continue_job(job_dir: Path, cfg: DictConfig) -> dict[str, Any] | None:
    """Ready ``job_dir`` for its job's resume; the record of a job that finished before, else None."""
    record = _record(job_dir / METRICS_FILE)
    status = record.get("status")
    if status in SUCCEEDED:
        log.info("resume: job %s %s before; its record is kept", job_dir.name, status)
        return record
    earlier = sorted(p for p in job_dir.iterdir() if p.name not in _KEPT)
    if not earlier:
        return None  # never started
    attempts = job_dir / ATTEMPTS
    attempt = attempts / str(1 + (len(list(attempts.iterdir())) if attempts.is_dir() else 0))
    attempt.mkdir(parents=True)
    for path in earlier:  # renamed, never copied: the directory's earlier files move whole or stay
        os.rename(path, attempt / path.name)
    found = [attempt / "checkpoints" / name for name in _CHECKPOINTS if (attempt / "checkpoints" / name).is_file()]
    if status in _STOPPED and found and _epochs_left(found[0], cfg):
        with open_dict(cfg):
            cfg.ckpt_path = str(found[0])
        log.info("resume: job %s stopped (%s); it continues from %s", job_dir.name, status or "no record", found[0])
    else:
        log.info("resume: job %s %s; it runs again", job_dir.name, status or "left no record")
    return None


def _epochs_left(ckpt_path: Path, cfg: DictConfig) -> bool:
    """Whether the checkpoint has training left (a job stopped while testing saved the whole fit: it runs again)."""
    from modelforge.deploy.load import load_checkpoint
    from modelforge.train.checkpoints import check_epochs_left

    if OmegaConf.select(cfg, "trainer.fast_dev_run"):
        return False  # a smoke test's few batches: run again, as Lightning resumes no fast_dev_run

    try:
        check_epochs_left(load_checkpoint(ckpt_path), OmegaConf.to_container(cfg.trainer, resolve=True))
    except ModelforgeError:  # nothing left to train, or a checkpoint that cannot be read: the job runs again
        return False
    return True


def _record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
