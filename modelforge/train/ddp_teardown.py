"""Ending a DDP run cleanly on every rank, before the next run (or sweep job) starts.

Lightning 2.6 leaves a gloo process group open at the end of a run, and its
launcher watches the ranks it started from a thread that SIGKILLs the whole
process tree as soon as one of them exits non-zero. A rank that exits with a live
gloo group can abort during interpreter shutdown ("terminate called without an
active exception"); the watcher then kills the main process, and in a sweep the
orphaned rank holds the sweep's output pipes open. So every rank closes the group
itself, and rank 0 waits for the ranks it started and checks how they ended.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytorch_lightning as pl
import torch

from modelforge.errors import ModelforgeError

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
