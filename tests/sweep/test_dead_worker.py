"""A worker of a shared study SIGKILLed mid-trial: Optuna's heartbeat fails its trial (FAIL in the study, not RUNNING
forever) and the killed job, which wrote no metrics.json, shows in its sweep's summary as failed. Real processes, a
real SIGKILL, a journal file and a real PostgreSQL server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from modelforge.sweep.study import open_storage
from tests.conftest import child_env
from tests.helpers.sweep_summary import read_summary

GRACE_S = 4  # heartbeats every second; a trial silent for 4 s is failed


def start_search(tmp_path: Path, name: str, storage: str, tiny_args: list[str], *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "modelforge", "train", "-m", "hparams_search=optuna", *tiny_args,
               f"hydra.sweeper.storage='{storage}'", "hydra.sweeper.study_name=shared",  # quoted: the URL has '='
               "hydra.sweeper.heartbeat_interval=1", f"hydra.sweeper.grace_period={GRACE_S}",
               "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", *extra,
               f"hydra.sweep.dir={tmp_path / name}"]
    return subprocess.Popen(command, cwd=tmp_path, env=child_env(OMP_NUM_THREADS="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def training_job(sweep_dir: Path, proc: subprocess.Popen, limit_s: float = 300) -> Path:
    """The job directory of ``sweep_dir`` whose run has written a checkpoint: its trial is under way."""
    deadline = time.monotonic() + limit_s
    while not (found := sorted(sweep_dir.glob("*/checkpoints/last.ckpt"))):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no trial got under way (rc {proc.returncode}): {proc.communicate()[1][-3000:]}")
        time.sleep(0.1)
    return found[0].parent.parent


# The journal's heartbeat is modelforge's (Optuna 5 has none there); PostgreSQL's is Optuna's RDBStorage own: -m slow.
@pytest.fixture(params=["journal", pytest.param("postgresql", marks=pytest.mark.slow)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "journal":
        return f"journal:{tmp_path / 'shared_fs' / 'study.log'}"
    return request.getfixturevalue("postgres_url")


@pytest.mark.e2e
def test_a_killed_workers_trial_fails_and_shows_in_its_summary(tmp_path: Path, tiny_args: list[str],
                                                               storage: str) -> None:
    doomed = start_search(tmp_path, "worker_a", storage, tiny_args, "hydra.sweeper.n_trials=1",
                          "trainer.max_epochs=100000")  # its trial trains until it is killed
    other = start_search(tmp_path, "worker_b", storage, tiny_args, "hydra.sweeper.n_trials=1", "trainer.max_epochs=1")
    job = training_job(tmp_path / "worker_a", doomed)
    doomed.kill()  # SIGKILL: no handler runs, nothing is written
    doomed.communicate()
    killed_at = time.monotonic()
    assert not (job / "metrics.json").exists()
    out_b, err_b = other.communicate(timeout=600)
    assert other.returncode == 0, err_b[-3000:]
    time.sleep(max(0.0, GRACE_S + 1 - (time.monotonic() - killed_at)))  # its last heartbeat is past the grace period

    # The next run of the search: worker a's command again, into its own directory, continuing the shared study.
    again = start_search(tmp_path, "worker_a", storage, tiny_args, "hydra.sweeper.n_trials=1", "trainer.max_epochs=1")
    out_a, err_a = again.communicate(timeout=600)
    assert again.returncode == 0, err_a[-3000:]  # the dead job is history: this run's own trial finished

    trials = optuna.load_study(study_name="shared", storage=open_storage(storage)).get_trials()
    dead = [t for t in trials if t.user_attrs.get("run_dir") == str(job)]
    assert len(dead) == 1 and dead[0].state == optuna.trial.TrialState.FAIL
    assert sorted(t.state.name for t in trials) == ["COMPLETE"] * 2 + ["FAIL"]
    said = f"trial {dead[0].number} failed: its worker stopped without a word: no heartbeat for over {GRACE_S} s"
    assert said in out_b + out_a  # whichever worker failed it said so

    record = json.loads((job / "metrics.json").read_text())
    assert record["status"] == "failed" and record["trial"] == dead[0].number
    assert record["error"].startswith("WorkerLost: its worker stopped without a word")
    rows = {row["job"]: row for row in read_summary(tmp_path / "worker_a")}
    assert set(rows) == {job.name, next(r for r in rows if r != job.name)}  # the dead job and the new one
    assert rows[job.name]["status"] == "failed" and rows[job.name]["error"].startswith("WorkerLost: ")
    assert rows[job.name]["overrides"]  # what the dead trial ran with, from its job's .hydra/overrides.yaml
    assert [row["status"] for name, row in rows.items() if name != job.name] == ["finished"]
    assert f"job {job.name} failed" in out_a  # the printed table names it


@pytest.mark.e2e
@pytest.mark.slow
def test_a_paused_worker_finds_its_trial_failed_and_says_so(tmp_path: Path, tiny_args: list[str]) -> None:
    storage = f"journal:{tmp_path / 'study.log'}"
    worker = start_search(tmp_path, "worker", storage, tiny_args, "hydra.sweeper.n_trials=1", "trainer.max_epochs=3")
    job = training_job(tmp_path / "worker", worker)
    worker.send_signal(signal.SIGSTOP)  # alive, but silent past the grace period (a stalled filesystem, a swap storm)
    try:
        time.sleep(GRACE_S + 1)
        from modelforge.sweep.heartbeat import Heartbeat, fail_stale_trials

        fail_stale_trials(optuna.load_study(study_name="shared", storage=open_storage(
            storage, heartbeat=Heartbeat(1, GRACE_S))))  # another worker of the study looks
        assert json.loads((job / "metrics.json").read_text())["status"] == "failed"
    finally:
        worker.send_signal(signal.SIGCONT)
    out, err = worker.communicate(timeout=600)

    assert worker.returncode == 0, err[-3000:]  # its run finished: its own record says so, no traceback
    assert "Traceback" not in err
    assert "trial 0 was failed by another worker of the study: this run goes on unreported" in out  # its pruning
    assert "trial 0 ended here as complete, but another worker of the study had failed it" in out
    assert json.loads((job / "metrics.json").read_text())["status"] == "finished"
    (trial,) = optuna.load_study(study_name="shared", storage=open_storage(storage)).get_trials()
    assert trial.state == optuna.trial.TrialState.FAIL
