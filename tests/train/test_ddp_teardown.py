"""Rank 0 reaps the rank processes it launched, and says which did not end cleanly."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from modelforge.train.ddp_teardown import (
    RankExitError,
    close_process_group,
    ddp_run_scope,
    reap_child_ranks,
)


def _rank(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def _trainer(procs: list[subprocess.Popen] | None) -> SimpleNamespace:
    # Only the attribute path Lightning's launcher exposes: trainer.strategy.launcher.procs.
    launcher = None if procs is None else SimpleNamespace(procs=procs)
    return SimpleNamespace(strategy=SimpleNamespace(launcher=launcher))


def test_clean_ranks_are_waited_for() -> None:
    procs = [_rank("import time; time.sleep(0.3)"), _rank("pass")]
    assert reap_child_ranks(_trainer(procs), timeout_s=30) == []
    assert [p.returncode for p in procs] == [0, 0]


def test_a_failed_rank_and_a_stuck_rank_are_named_and_the_stuck_one_killed() -> None:
    procs = [_rank("raise SystemExit(3)"), _rank("import time; time.sleep(60)")]
    started = time.perf_counter()
    problems = reap_child_ranks(_trainer(procs), timeout_s=1)
    assert time.perf_counter() - started < 30
    assert problems[0] == f"rank 1 (pid {procs[0].pid}) exited with code 3; see its train_ddp_process_1.log"
    assert problems[1] == f"rank 2 (pid {procs[1].pid}) was still running after 1 s and was killed"
    assert procs[1].returncode is not None  # gone, not orphaned


def test_without_a_launcher_there_is_nothing_to_reap() -> None:
    assert reap_child_ranks(_trainer(None), timeout_s=1) == []


def test_a_finished_run_with_a_failed_rank_raises_and_a_failed_run_keeps_its_own_error() -> None:
    with pytest.raises(RankExitError, match=r"the run finished, but rank 1 \(pid \d+\) exited with code 5"):
        with ddp_run_scope(_trainer([_rank("raise SystemExit(5)")])):
            pass
    with pytest.raises(ZeroDivisionError):
        with ddp_run_scope(_trainer([_rank("raise SystemExit(5)")])):
            1 / 0


def test_the_process_group_is_closed(tmp_path) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    close_process_group(synchronize=True)
    assert not torch.distributed.is_initialized()
    close_process_group(synchronize=True)  # nothing open: nothing to do
