"""Ending a DDP run cleanly on every rank, before the next run (or sweep job) starts.

Lightning 2.6 leaves a gloo process group open at the end of a run, and its
launcher watches the ranks it started from a thread that SIGKILLs the whole
process tree as soon as one of them exits non-zero. A rank that exits with a live
gloo group can abort during interpreter shutdown ("terminate called without an
active exception"); the watcher then kills the main process, and in a sweep the
orphaned rank holds the sweep's output pipes open (torchrun, too, counts such a
rank as failed). So every rank closes the group itself, and rank 0 waits for the
ranks it started (none under torchrun or srun) and checks how they ended.
A stop signal ends every rank at the same batch: :class:`StopTogether`.
"""

from __future__ import annotations

import functools
import logging
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from modelforge.errors import ModelforgeError
from modelforge.train import launch

log = logging.getLogger(__name__)

# After a finished run the other ranks only have to exit; after a failure they may
# be stuck in a collective that rank 0 will never join, so wait less.
CHILD_EXIT_TIMEOUT_S = 60.0
CHILD_EXIT_TIMEOUT_AFTER_FAILURE_S = 10.0


class RankExitError(ModelforgeError):
    """A DDP rank started by this process did not end cleanly."""


@contextmanager
def ddp_run_scope(trainer: pl.Trainer) -> Iterator[None]:
    """Run a block of trainer calls; on the way out close the process group and reap the ranks."""
    finished = False
    try:
        yield
        finished = True
    finally:
        close_process_group(synchronize=finished)
        reaped = reap_child_ranks(trainer, CHILD_EXIT_TIMEOUT_S if finished else CHILD_EXIT_TIMEOUT_AFTER_FAILURE_S)
    if reaped:  # only after a finished run: a failure already has its own error to raise
        raise RankExitError(f"the run finished, but {'; '.join(reaped)}")


def close_process_group(synchronize: bool) -> None:
    """Destroy the default process group if one is open; ``synchronize`` waits for every rank first."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        if synchronize:  # no rank tears the group down while another still uses it
            dist.barrier()
    finally:
        dist.destroy_process_group()
        launch.release_store()


def reap_child_ranks(trainer: pl.Trainer, timeout_s: float) -> list[str]:
    """Wait for the rank processes this process launched; kill any still running after ``timeout_s``.

    Returns one line per rank that did not exit with code 0 (empty when all did,
    or when this process launched none, as on rank > 0 or without DDP).
    """
    procs: list[subprocess.Popen] = list(getattr(trainer.strategy.launcher, "procs", None) or [])
    problems = []
    for rank, proc in enumerate(procs, start=1):
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            problems.append(f"rank {rank} (pid {proc.pid}) was still running after {timeout_s:.0f} s and was killed")
            continue
        if code != 0:
            problems.append(f"rank {rank} (pid {proc.pid}) exited with code {code}; see its train_ddp_process_{rank}.log")
    for line in problems:
        log.error(line)
    return problems


class StopTogether(Callback):
    """Under DDP, a stop signal that reaches any rank ends every rank at the end of the same batch.

    Lightning 2.6 broadcasts from inside its SIGTERM handler, a collective that pairs with whichever one
    another rank is in at that moment, and each rank stops at the end of the batch its own signal came in:
    ranks signalled together (torchrun's agent and srun signal every rank) hang in mismatched collectives
    until they are killed (Lightning-AI/pytorch-lightning#20806; the handler's broadcast came with #20825).
    Here the handler only takes note; after each batch the ranks OR their notes (one all-reduce of a bool)
    and, signalled, all raise Lightning's SIGTERMException at that batch's end.
    """

    def __init__(self) -> None:
        self._before: Any = None  # the SIGTERM handler under Lightning's (modelforge's stop_signals)
        self._signalled = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._before, self._signalled = signal.getsignal(signal.SIGTERM), False  # before Lightning sets its own

    def _take_over(self, trainer: pl.Trainer, *_: Any) -> None:  # just after Lightning set its handlers
        if trainer.world_size > 1 and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, functools.partial(self._on_sigterm, trainer))

    on_sanity_check_start = on_train_start = on_test_start = _take_over

    def _on_sigterm(self, trainer: pl.Trainer, signum: int, frame: FrameType | None) -> None:
        if not self._signalled and trainer.strategy.launcher is not None:
            trainer.strategy.launcher.kill(signum)  # as Lightning's handler: on to the ranks its launcher started
        self._signalled = True
        if callable(self._before):
            self._before(signum, frame)  # records which signal stopped the run

    def _stop_together(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.world_size > 1 and trainer.strategy.reduce_boolean_decision(self._signalled, all=False):
            trainer._signal_connector.received_sigterm = True  # what Lightning's loops check after each batch

    on_train_batch_end = on_validation_batch_end = on_test_batch_end = _stop_together
