"""DDP on CPU (gloo, two processes) as a run and inside a sweep: real subprocesses. A file of its own
so that pytest-xdist (whole files per worker) runs these two long tests beside the other sweeps."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.helpers.sweep_summary import read_summary


@pytest.mark.e2e
@pytest.mark.slow  # 14 s: tests/train/test_torchrun.py's lightning_run checks the same in the default run
def test_ddp_cpu_writes_one_run(cli, tmp_path: Path, tiny_args: list[str]) -> None:
    run_dir = tmp_path / "run"
    result = cli("train", "trainer=ddp_cpu", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
                 "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", *tiny_args,
                 f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in (run_dir / "train_ddp_process_1.log").read_text()  # two processes
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("metrics.json")] == [Path("run/metrics.json")]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no directory per rank
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "finished"
    rows = list(csv.DictReader((run_dir / "logs" / "metrics.csv").read_text().splitlines(keepends=True)))
    # Logged once, not per rank: the validation, the test, and the step values once (2 batches an epoch:
    # the step interval is the epoch's length).
    for key in ("val/acc", "train/loss_epoch", "test/acc", "train/loss_step", "lr-Adam"):
        assert sum(bool(r[key]) for r in rows) == 1, key


@pytest.mark.e2e
@pytest.mark.slow  # 34 s: test_torchrun.py's lightning_run keeps DDP in the default run
def test_ddp_jobs_in_a_sweep_share_nothing_but_the_sweep(sweep, tmp_path: Path) -> None:
    result = sweep("trainer=ddp_cpu", "enc_sizes=[8],[4]", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
                   "trainer.limit_val_batches=1", "trainer.limit_test_batches=1")
    # Non-zero also when a rank exited uncleanly: rank 0 reaps its ranks and raises.
    assert result.returncode == 0, result.stderr[-2000:]
    assert "terminate called" not in result.stderr  # no rank aborted at exit with its process group open
    rows = read_summary(tmp_path / "sweep")
    assert [r["status"] for r in rows] == ["finished", "finished"]
    for job in ("0", "1"):  # each job started its own rank-1 process, in its own directory
        assert (tmp_path / "sweep" / job / "train_ddp_process_1.log").is_file()
    assert result.stdout.count("sweep summary") == 1  # the children ran one job each, not the sweep
