"""A sweep stopped by SIGTERM fails and names the jobs that never ran; a sweep dir is never reused."""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import pytest

from tests.helpers.sweep_summary import read_summary
from tests.helpers.signals import signal_and_wait, start_train, wait_for


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.e2e
def test_sigterm_ends_the_sweep_non_zero_and_the_summary_names_jobs_that_never_ran(
        tmp_path: Path, tiny_args: list[str]) -> None:
    sweep_dir = tmp_path / "sweep"
    proc = start_train("-m", "model=mlp", "model.hidden_sizes=[16],[8],[4]", "trainer.max_epochs=100000",
                       *tiny_args, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    wait_for(sweep_dir / "0" / "checkpoints" / "last.ckpt", proc)  # job 0 is training
    rc, out, err = signal_and_wait(proc, signal.SIGTERM)

    assert rc == 143, err[-3000:]
    rows = {r["job"]: r for r in read_summary(sweep_dir)}
    assert {job: r["status"] for job, r in rows.items()} == {"0": "terminated", "1": "not run", "2": "not run"}
    assert rows["1"]["overrides"] == "model.hidden_sizes=[8]"
    assert "the sweep stopped early: job(s) 1, 2 never ran" in out
    assert "error: stopped by SIGTERM" in err
    assert not (sweep_dir / "1").exists()


def test_a_sweep_into_a_directory_that_holds_one_is_refused_and_leaves_it_alone(sweep_here, tmp_path: Path) -> None:
    first = sweep_here("model=mlp", "model.hidden_sizes=[8]", "trainer.fast_dev_run=true")
    assert first.returncode == 0, first.stderr[-2000:]
    before = _snapshot(tmp_path / "sweep")

    again = sweep_here("model=mlp", "model.hidden_sizes=[4]", "trainer.fast_dev_run=true")
    assert again.returncode == 2
    assert f"error: hydra.sweep.dir: {tmp_path / 'sweep'} already holds a sweep (multirun.yaml" in again.stderr
    assert "hparams_search=optuna" in again.stderr and "Traceback" not in again.stderr
    assert _snapshot(tmp_path / "sweep") == before
