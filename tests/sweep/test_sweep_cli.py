"""Real sweeps, one fast_dev_run step per job on tiny generated data: in process where Hydra's basic
launcher runs the jobs here anyway, as subprocesses (e2e) for launchers, DDP and Optuna's failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.helpers.sweep_summary import read_summary


def test_two_value_sweep_gives_two_rows(sweep_here, tmp_path: Path) -> None:
    result = sweep_here("model=cnn", "enc_sizes=[8],[8,16]", "trainer.fast_dev_run=true")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = read_summary(tmp_path / "sweep")
    assert sorted(r["overrides"] for r in rows) == ["enc_sizes=[8,16]", "enc_sizes=[8]"]
    assert [r["status"] for r in rows] == ["finished", "finished"]
    assert float(rows[0]["val/acc"]) >= float(rows[1]["val/acc"])  # best first
    for row in rows:  # each job ran in its own directory and the row came from its metrics.json
        assert json.loads((Path(row["run_dir"]) / "metrics.json").read_text())["params"] == int(row["params"])
    assert "sweep summary (2 jobs, best first):" in result.stdout
    assert (tmp_path / "sweep" / "summary.md").read_text().count("| finished |") == 2
    assert not (tmp_path / "outputs").exists()


def test_bad_value_fails_its_job_only(sweep_here, tmp_path: Path) -> None:
    result = sweep_here("model=cnn", "enc_sizes=[8],[8,-1]", "trainer.fast_dev_run=true")
    assert result.returncode != 0
    rows = {r["overrides"]: r for r in read_summary(tmp_path / "sweep")}
    assert rows["enc_sizes=[8]"]["status"] == "finished" and float(rows["enc_sizes=[8]"]["test/acc"]) >= 0
    failed = rows["enc_sizes=[8,-1]"]
    assert failed["status"] == "failed"
    assert failed["error"].startswith("ConfigError: model.enc_sizes[1]: must be positive, got -1")
    # The failed job's own directory says so too; the finished one is untouched.
    assert json.loads((Path(failed["run_dir"]) / "metrics.json").read_text())["status"] == "failed"
    assert (Path(rows["enc_sizes=[8]"]["run_dir"]) / "checkpoints" / "last.ckpt").is_file()
    # Which job failed, in words, without a traceback.
    assert "Error executing job with overrides: ['model=cnn', 'enc_sizes=[8,-1]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert "job 1 failed (enc_sizes=[8,-1]): ConfigError: model.enc_sizes[1]" in result.stdout


def test_optuna_search_and_its_continuation(sweep_here, tmp_path: Path) -> None:
    import optuna

    sweep_dir = tmp_path / "sweep"
    first = sweep_here("hparams_search=optuna", "hydra.sweeper.n_trials=1", "trainer.fast_dev_run=true")
    assert first.returncode == 0, first.stderr[-2000:]
    rows = read_summary(sweep_dir)
    assert len(rows) == 1 and {r["status"] for r in rows} == {"finished"}
    for row in rows:
        swept = dict(o.split("=", 1) for o in row["overrides"].split())
        assert set(swept) == {"optim.lr", "enc_sizes", "activation", "model.dropout"}
        config = yaml.safe_load((Path(row["run_dir"]) / "config.yaml").read_text())
        assert config["model"]["enc_sizes"] == yaml.safe_load(swept["enc_sizes"])  # a list, not a string
        assert config["model"]["activation"] == swept["activation"]

    # Started again on the same sweep dir: the stored study goes on, with new points.
    again = sweep_here("hparams_search=optuna", "hydra.sweeper.n_trials=1", "trainer.fast_dev_run=true")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "continuing Optuna study 'modelforge': 1 trials stored" in again.stdout + again.stderr
    study = optuna.load_study(study_name="modelforge", storage=f"sqlite:///{sweep_dir}/optuna.db")
    assert len(study.trials) == 2 and len(read_summary(sweep_dir)) == 2
    params = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(set(params)) == 2  # the continued search did not repeat the first trials


def test_a_failed_optuna_trial_does_not_stop_the_search(sweep_here, tmp_path: Path) -> None:
    result = sweep_here("hparams_search=optuna", "hydra.sweeper.n_trials=2", "trainer.fast_dev_run=true",
                   "enc_sizes=choice([8],[8,-1])")
    rows = read_summary(tmp_path / "sweep")
    assert len(rows) == 2  # every trial ran
    failed = sorted(r["job"] for r in rows if r["status"] == "failed")
    assert failed and len(failed) < 2, [(r["status"], r["overrides"]) for r in rows]  # seeded: a mix
    assert all("must be positive, got -1" in r["error"] for r in rows if r["status"] == "failed")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"error: {len(failed)} job(s) of the sweep in {tmp_path / 'sweep'} failed: " in result.stderr
    assert all(job in result.stderr for job in failed)


@pytest.mark.e2e
@pytest.mark.slow  # 16 s: test_a_failed_optuna_trial_does_not_stop_the_search is the default run's
def test_a_failed_trial_in_a_parallel_optuna_search_fails_the_command(sweep, tmp_path: Path) -> None:
    # Joblib ends each job in a worker process: the failure is known to the parent from the job's metrics.json.
    result = sweep("hparams_search=optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", "hydra/launcher=joblib",
                   "hydra.launcher.n_jobs=2", "trainer.fast_dev_run=true", "enc_sizes=choice([8],[8,-1])")
    failed = sorted(r["job"] for r in read_summary(tmp_path / "sweep") if r["status"] == "failed")
    assert failed and result.returncode == 1, result.stderr[-2000:]
    assert f"error: {len(failed)} job(s) of the sweep in {tmp_path / 'sweep'} failed: {', '.join(failed)} " in result.stderr


@pytest.mark.parametrize(("launcher", "says"), [
    (["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], "Joblib.Parallel(n_jobs=2"),
    pytest.param(["hydra/launcher=submitit_local"], "Submitit 'local' sweep output dir",  # the SLURM launcher's path
                 marks=pytest.mark.slow),  # 24 s; joblib keeps jobs-in-other-processes in the default run
])
@pytest.mark.e2e
def test_launchers_run_jobs_in_other_processes(sweep, tmp_path: Path, launcher: list[str], says: str) -> None:
    result = sweep(*launcher, "enc_sizes=[8],[4]", "trainer.fast_dev_run=true")
    assert result.returncode == 0, result.stderr[-2000:]
    assert says in result.stdout + result.stderr
    assert [r["status"] for r in read_summary(tmp_path / "sweep")] == ["finished", "finished"]


def test_unknown_experiment_lists_the_available_ones(run_main, tmp_path: Path) -> None:
    result = run_main("train", "experiment=nope", cwd=tmp_path)
    assert result.returncode != 0 and "'nope'" in result.stderr
    assert all(name in result.stderr for name in ("activations", "enc_sizes", "fast", "seed_cnn"))


def test_an_experiment_sweeps_its_own_params(sweep_here, tmp_path: Path) -> None:
    result = sweep_here("experiment=activations", "trainer.fast_dev_run=true", "activation=relu,tanh")  # the command line wins
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(r["overrides"] for r in read_summary(tmp_path / "sweep")) == ["activation=relu", "activation=tanh"]


@pytest.mark.e2e
@pytest.mark.slow
def test_every_experiment_runs(sweep, tmp_path: Path) -> None:
    """The recipes together in one sweep; the two that declare a sweep of their own (each refused in a sweep over
    experiments, saying so) each as its own sweep, as that refusal advises."""
    shipped = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
    own_sweeps = ["activations", "enc_sizes"]
    recipes = [name for name in shipped if name not in own_sweeps]
    result = sweep(f"experiment={','.join(recipes)}", "trainer.fast_dev_run=true")
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(r["overrides"] for r in read_summary(tmp_path / "sweep")) == [f"experiment={n}" for n in recipes]
    for name in own_sweeps:
        result = sweep(f"experiment={name}", "trainer.fast_dev_run=true", sweep_dir=tmp_path / name)
        assert result.returncode == 0, result.stderr[-2000:]
        rows = read_summary(tmp_path / name)
        assert len(rows) > 1 and all(r["status"] == "finished" for r in rows), rows
