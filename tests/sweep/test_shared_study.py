"""One study, several processes: two `train -m` searches started together against one storage and one study name
(a journal file on a shared filesystem, a real PostgreSQL server) share the study: 2 x n_trials distinct trials,
each run once, each in a job directory of the process that ran it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.conftest import child_env
from tests.helpers.sweep_summary import read_summary

N_TRIALS = 3


def start_search(tmp_path: Path, name: str, storage: str, tiny_args: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "modelforge", "train", "-m", "hparams_search=optuna", *tiny_args,
               f"hydra.sweeper.n_trials={N_TRIALS}", f"hydra.sweeper.storage='{storage}'",  # quoted: the URL has '='
               "hydra.sweeper.study_name=shared",
               "trainer.max_epochs=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
               f"hydra.sweep.dir={tmp_path / name}"]
    return subprocess.Popen(command, cwd=tmp_path, env=child_env(OMP_NUM_THREADS="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(params=[pytest.param("journal", marks=pytest.mark.slow), "postgresql"])  # journal: 23 s, and
# test_dead_worker runs two processes on a journal study by default
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "journal":
        return f"journal:{tmp_path / 'shared_fs' / 'study.log'}"
    return request.getfixturevalue("postgres_url")


@pytest.mark.e2e
def test_two_processes_share_one_study_and_never_run_a_trial_twice(tmp_path: Path, tiny_args: list[str],
                                                                   storage: str) -> None:
    workers = {name: start_search(tmp_path, name, storage, tiny_args) for name in ("worker_a", "worker_b")}
    outputs = {name: proc.communicate(timeout=600) for name, proc in workers.items()}
    for name, proc in workers.items():
        assert proc.returncode == 0, outputs[name][1][-3000:]

    study = optuna.load_study(study_name="shared", storage=_optuna_storage(storage))
    trials = study.get_trials()
    assert sorted(t.number for t in trials) == list(range(2 * N_TRIALS))
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    ran: dict[int, Path] = {}
    for name in workers:  # each process ran N_TRIALS of them, in job directories of its own sweep dir
        rows = read_summary(tmp_path / name)
        assert len(rows) == N_TRIALS and {r["status"] for r in rows} == {"finished"}
        for row in rows:
            number = int(row["job"].split("_")[0])  # job number = trial number
            assert number not in ran, f"trial {number} ran twice"
            ran[number] = Path(row["run_dir"])
            assert ran[number].parent == tmp_path / name
    assert sorted(ran) == list(range(2 * N_TRIALS))
    for trial in trials:  # the study knows where each trial's run is, and has the value its run recorded
        run_dir = Path(trial.user_attrs["run_dir"])
        assert run_dir == ran[trial.number]
        assert json.loads((run_dir / "metrics.json").read_text())["val/acc"] == trial.value
    # Points are not compared: both workers have the same seed, and two processes that read the trial count at the
    # same instant reseed alike (the README says to give each worker its own seed; test_search_space pins why).


def _optuna_storage(url: str):
    from modelforge.sweep.study import open_storage

    return open_storage(url)
