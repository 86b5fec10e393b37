"""A sweep killed by real signals resumes in its own directory (hydra.callbacks.sweep_summary.resume=true): finished
jobs kept, stopped ones continued from their state, the rest run, every job under its number; the results equal
those of a sweep never interrupted, to the bit. A resume with other overrides is refused in one line."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modelforge.sweep.resume import RESUME_KEY, job_is_held
from tests.conftest import child_env
from tests.sweep.conftest import read_summary
from tests.train.signal_helpers import signal_and_wait, start_train, wait_for

RESUME = f"{RESUME_KEY}=true"
SWEEP = ["model=mlp", "model.hidden_sizes=[8],[16],[12],[4]", "trainer.max_epochs=10"]
# Jobs 2 and 3 train 10 epochs (a signal after the first finds job 2 training), jobs 0 and 1 one.
GRID = ["model=mlp", "trainer.max_epochs=1,10", "model.hidden_sizes=[8],[12]"]
# What a resumed run records otherwise than one never stopped: where, and how long, not what it learnt.
UNCOMPARED = {"run_dir", "config", "best_ckpt", "learning_curves", "timings", "train_time_s", "epochs_this_run",
              "environment"}  # the software: its commit may change while the test runs


def _learnt(job_dir: Path) -> dict:
    return {k: v for k, v in json.loads((job_dir / "metrics.json").read_text()).items() if k not in UNCOMPARED}


def _rows(sweep_dir: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k not in ("train_time_s", "run_dir")} for row in read_summary(sweep_dir)]


@pytest.mark.e2e
def test_a_sweep_stopped_by_sigterm_in_its_third_job_resumes_to_the_results_of_one_never_stopped(
        tmp_path: Path, tiny_args: list[str], sweep_here) -> None:
    sweep_dir = tmp_path / "sweep"
    proc = start_train("-m", *GRID, *tiny_args, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    wait_for(sweep_dir / "2" / "checkpoints" / "last.ckpt", proc)  # job 2 finished its first epoch of 10
    rc, out, err = signal_and_wait(proc, signal.SIGTERM)
    assert rc == 143, err[-3000:]
    assert {r["job"]: r["status"] for r in read_summary(sweep_dir)} == {
        "0": "finished", "1": "finished", "2": "terminated", "3": "not run"}
    assert f"resume with the same command and hydra.sweep.dir={sweep_dir} {RESUME}" in err
    kept = (sweep_dir / "0" / "metrics.json").read_bytes()

    resumed = sweep_here(*GRID, RESUME)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["job"] for r in sorted(read_summary(sweep_dir), key=lambda r: r["job"])] == ["0", "1", "2", "3"]
    assert {r["status"] for r in read_summary(sweep_dir)} == {"finished"}
    assert (sweep_dir / "0" / "metrics.json").read_bytes() == kept  # a finished job is not run again
    record = json.loads((sweep_dir / "2" / "metrics.json").read_text())
    assert record["epochs_this_run"] < 10 and "model.hidden_sizes=[8]" in record["overrides"]
    assert (sweep_dir / "2" / ".attempts" / "1" / "checkpoints" / "interrupted.ckpt").is_file()

    never_stopped = tmp_path / "never_stopped"
    alone = sweep_here("model=mlp", "trainer.max_epochs=10", "model.hidden_sizes=[8]", sweep_dir=never_stopped)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert _learnt(sweep_dir / "2") == _learnt(never_stopped / "0")
    assert {"val/loss", "test/loss", "test/acc", "global_step"} <= set(_learnt(never_stopped / "0"))


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_resume_with_other_overrides_is_refused_in_one_line_and_changes_nothing(sweep_here, tmp_path: Path) -> None:
    first = sweep_here("model=mlp", "model.hidden_sizes=[8],[4]", "trainer.fast_dev_run=true")
    assert first.returncode == 0, first.stderr[-2000:]
    before = _snapshot(tmp_path / "sweep")

    extra = sweep_here("model=mlp", "model.hidden_sizes=[8],[4]", "trainer.fast_dev_run=true", "optim.lr=0.5", RESUME)
    assert extra.returncode == 2
    assert extra.stderr.count("\n") == 1 and "Traceback" not in extra.stderr, extra.stderr
    assert extra.stderr.startswith(f"error: {RESUME_KEY}: a resume runs the sweep's own overrides: this command adds "
                                   "optim.lr=0.5 (the sweep in ")
    assert _snapshot(tmp_path / "sweep") == before

    nowhere = sweep_here("model=mlp", "trainer.fast_dev_run=true", RESUME, sweep_dir=tmp_path / "none")
    assert nowhere.returncode == 2 and "holds no sweep to resume" in nowhere.stderr
    assert not (tmp_path / "none").exists()

    again = sweep_here("model=mlp", "model.hidden_sizes=[8],[4]", "trainer.fast_dev_run=true", RESUME)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {r["job"]: r["status"] for r in read_summary(tmp_path / "sweep")} == {"0": "finished", "1": "finished"}


def test_a_job_held_by_another_process_is_not_run_and_its_directory_is_left_alone(sweep_here, tmp_path: Path) -> None:
    grid = ["model=mlp", "model.hidden_sizes=[8],[4]", "trainer.max_epochs=1"]
    first = sweep_here(*grid)
    assert first.returncode == 0, first.stderr[-2000:]
    job_dir = tmp_path / "sweep" / "1"
    (job_dir / "metrics.json").unlink()  # as a job killed outright leaves it
    holder = subprocess.Popen([sys.executable, "-c", (  # a second resume, running job 1
        "import sys; from pathlib import Path; from modelforge.files.claim import claimed\n"
        f"with claimed(Path({str(job_dir)!r}) / 'sweep_job', 'sweep job 1'):\n"
        "    print('held', flush=True); sys.stdin.read()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=child_env())
    try:
        assert holder.stdout.readline() == "held\n"
        assert job_is_held(job_dir)
        meanwhile = sweep_here(*grid, RESUME)
    finally:
        holder.communicate("")
    assert meanwhile.returncode == 1
    assert "another resume of this sweep runs the job" in meanwhile.stderr + meanwhile.stdout
    assert not (job_dir / "metrics.json").exists() and not (job_dir / ".attempts").exists()

    assert not job_is_held(job_dir)
    after = sweep_here(*grid, RESUME)
    assert after.returncode == 0, after.stderr[-2000:]
    assert {r["job"]: r["status"] for r in read_summary(tmp_path / "sweep")} == {"0": "finished", "1": "finished"}


def _pid(job_dir: Path) -> int:
    return int(json.loads((job_dir / ".run_claim").read_text())["pid"])


def _alive(job_dir: Path) -> bool:
    return Path(f"/proc/{_pid(job_dir)}").exists() and "zombie" not in Path(f"/proc/{_pid(job_dir)}/status").read_text()


@pytest.mark.slow
@pytest.mark.e2e
def test_a_submitit_sweep_with_one_job_terminated_and_one_killed_resumes_to_the_results_of_one_never_stopped(
        tmp_path: Path, tiny_args: list[str], sweep_here) -> None:
    sweep_dir, launcher = tmp_path / "sweep", "hydra/launcher=submitit_local"
    env = child_env()
    proc = subprocess.Popen([sys.executable, "-m", "modelforge", "train", "-m", *SWEEP, launcher, *tiny_args,
                             f"hydra.sweep.dir={sweep_dir}"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for job, signum in (("1", signal.SIGTERM), ("2", signal.SIGKILL)):  # each job is a process of submitit's
        wait_for(sweep_dir / job / "checkpoints" / "last.ckpt", proc, limit_s=600)  # an epoch of 10 trained
        os.kill(_pid(sweep_dir / job), signum)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode != 0
    # submitit's jobs outlive the sweep's process, which stops waiting at the first failed job
    while not all((sweep_dir / job / "metrics.json").is_file() for job in ("0", "1", "3")) or _alive(sweep_dir / "2"):
        time.sleep(0.1)
    status = {job: json.loads(p.read_text())["status"] if (p := sweep_dir / job / "metrics.json").is_file() else None
              for job in ("1", "2")}
    assert status == {"1": "terminated", "2": None}, err[-3000:]

    resumed = subprocess.run([sys.executable, "-m", "modelforge", "train", "-m", *SWEEP, launcher, *tiny_args,
                              f"hydra.sweep.dir={sweep_dir}", RESUME], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "continues from" in (sweep_dir / "1" / "train.log").read_text()

    never_stopped = tmp_path / "never_stopped"
    reference = sweep_here(*SWEEP, sweep_dir=never_stopped)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert _rows(sweep_dir) == _rows(never_stopped)
    for job in ("0", "1", "2", "3"):
        assert {k: v for k, v in _learnt(sweep_dir / job).items()} == _learnt(never_stopped / job), job


@pytest.mark.slow
@pytest.mark.e2e
def test_an_optuna_search_killed_in_a_trial_resumes_that_trial_as_a_retry_and_stops_at_n_trials(
        tmp_path: Path, tiny_args: list[str], sweep_here) -> None:
    import optuna
    from optuna.trial import TrialState

    sweep_dir = tmp_path / "sweep"
    search = ["model=mlp", "trainer.max_epochs=10", "hparams_search=optuna", "hydra.sweeper.n_trials=3",
              "~hydra.sweeper.params.enc_sizes", "~hydra.sweeper.params.activation"]
    proc = start_train("-m", *search, *tiny_args, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    deadline = time.monotonic() + 600
    while not list(sweep_dir.glob("1_*/checkpoints/last.ckpt")):  # trial 1 trains
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    proc.kill()  # SIGKILL: the search's process says nothing, its trial stays RUNNING in the study
    proc.communicate()
    (killed,) = sweep_dir.glob("1_*")

    resumed = sweep_here(*search, "hydra.sweeper.retry_stale_trials=1", RESUME)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    study = optuna.load_study(study_name="modelforge", storage=f"sqlite:///{sweep_dir / 'optuna.db'}")
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert trials[2].params == trials[1].params and trials[2].system_attrs["failed_trial"] == 1
    assert json.loads((killed / "metrics.json").read_text())["status"] == "failed"
    assert "WorkerLost" in json.loads((killed / "metrics.json").read_text())["error"]
