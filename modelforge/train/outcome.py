"""How a run that stopped early is recorded in ``metrics.json``, and what ``train()`` raises for it."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.utilities.exceptions import SIGTERMException

from modelforge.resources import allocation_error, is_allocation_failure
from modelforge.train.interrupted import INTERRUPTED_CKPT
from modelforge.train.rundir import write_json
from modelforge.train.signals import ReceivedSignal
from modelforge.stops import Interrupted, RunStopped, Terminated

log = logging.getLogger(__name__)


def stop_reason(exc: BaseException, trainer: pl.Trainer, received: ReceivedSignal,
                model_cfg: Mapping[str, Any] | None) -> BaseException:
    """The exception that says why the run stopped: ``exc`` itself, or a clearer one in its place.

    Lightning ends a run stopped by SIGTERM with ``SIGTERMException`` (a SystemExit with status
    0) and one stopped by Ctrl-C with ``sys.exit(1)``; both become :class:`RunStopped` here.
    """
    if isinstance(exc, RunStopped):
        return exc
    if isinstance(exc, SIGTERMException) or (received.signum is not None and isinstance(exc, SystemExit)):
        return Terminated(received.signum or signal.SIGTERM)
    if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit) and trainer.interrupted):
        return Interrupted()
    if is_allocation_failure(exc):
        return allocation_error(exc, model_cfg, "while training")
    return exc


def failure_record(reason: BaseException, run_dir: Path) -> dict[str, Any]:
    """What metrics.json says of a run that stopped on ``reason``, and how to resume it."""
    status = reason.status if isinstance(reason, RunStopped) else "failed"
    failure: dict[str, Any] = {"status": status, "error": f"{type(reason).__name__}: {reason}"}
    checkpoints = run_dir / "checkpoints"
    candidates = [checkpoints / INTERRUPTED_CKPT]
    if isinstance(reason, (Terminated, Interrupted)):
        candidates.append(checkpoints / "last.ckpt")  # stopped while testing: the fit is complete
    # Checkpoints are written by rename (AtomicCheckpointIO): one that exists is whole.
    resume = next((p for p in candidates if p.is_file() and p.stat().st_size > 0), None)
    if resume is not None:
        failure["resume_with"] = f"ckpt_path={resume}"
        if isinstance(reason, RunStopped):
            reason.resume_with = failure["resume_with"]  # the CLI's message says it too
        log.error("training stopped (%s); its state is in %s: resume with ckpt_path=%s",
                  status, resume, resume)
    return failure


def write_metrics(path: Path, metrics: dict[str, Any], failing: bool) -> None:
    """Write metrics.json; while a run is already failing, a write error is reported, not raised.

    Raising it would hide the run's own error (the one the user needs) behind this one.
    """
    try:
        write_json(path, metrics)
    except OSError as exc:
        if not failing:
            raise
        print(f"error: could not write {path}: {exc}", file=sys.stderr)
