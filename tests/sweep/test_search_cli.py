"""Optuna searches through the CLI, in this process (Hydra's basic launcher runs the jobs here): several objectives,
samplers, a search whose every trial fails, and settings refused before the sweep dir is made."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml

from tests.helpers.sweep_summary import read_summary

SEARCH = ("hparams_search=optuna", "trainer.fast_dev_run=true")


def test_several_objectives_mark_the_pareto_front_and_draw_it(sweep_here, tmp_path: Path) -> None:
    result = sweep_here(*SEARCH, "hydra.sweeper.n_trials=3", "hydra.sweeper.objectives=[val/acc,macs]",
                        sweep_dir=Path("sweep"))  # relative to the working directory: printed whole
    assert result.returncode == 0, result.stderr[-2000:]
    sweep_dir = tmp_path / "sweep"
    assert "maximize val/acc, minimize macs, sampler nsgaii (seed 0)" in result.stdout
    rows = read_summary(sweep_dir)
    assert list(rows[0])[:5] == ["job", "status", "pareto", "val/acc", "macs"]
    front = {r["job"] for r in rows if r["pareto"] == "yes"}
    for row in rows:  # a row is on the front when no other row is as good in both and better in one
        beaten = any(float(o["val/acc"]) >= float(row["val/acc"]) and int(o["macs"]) <= int(row["macs"])
                     and (float(o["val/acc"]), int(o["macs"])) != (float(row["val/acc"]), int(row["macs"]))
                     for o in rows)
        assert (row["job"] in front) == (not beaten), row
        assert json.loads((Path(row["run_dir"]) / "metrics.json").read_text())["macs"] == int(row["macs"])
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert {s["trial"] for s in results["pareto_front"]} == {int(job.split("_")[0]) for job in front}
    for picture in ("optimization_history_val_acc.png", "optimization_history_macs.png", "pareto_front.png"):
        assert (sweep_dir / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", picture
    assert f"plots: {sweep_dir / 'optimization_history_val_acc.png'}, " in result.stdout


def test_a_search_whose_every_trial_fails_says_so_without_a_traceback(sweep_here, tmp_path: Path) -> None:
    result = sweep_here(*SEARCH, "hydra.sweeper.n_trials=1", "enc_sizes=choice([8,-1])")
    assert result.returncode == 1
    assert "no trial of study 'modelforge' has completed (1 stored): it has no best value yet" in result.stdout
    assert f"error: 1 job(s) of the sweep in {tmp_path / 'sweep'} failed: " in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "sweep" / "optimization_results.yaml").exists()
    states = [t.state for t in optuna.load_study(study_name="modelforge",
                                                 storage=f"sqlite:///{tmp_path}/sweep/optuna.db").trials]
    assert states == [optuna.trial.TrialState.FAIL]


def test_max_failure_rate_zero_stops_at_the_first_failed_trial(sweep_here, tmp_path: Path) -> None:
    result = sweep_here(*SEARCH, "hydra.sweeper.n_trials=3", "enc_sizes=choice([8,-1])",
                        "hydra.sweeper.max_failure_rate=0.0")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "the search stops: 1 of 1 trial(s) of the last batch failed" in result.stdout
    rows = read_summary(tmp_path / "sweep")
    assert rows[-1]["status"] == "failed" and len(rows) < 3


def test_the_grid_sampler_runs_each_point_once(sweep_here, tmp_path: Path) -> None:
    result = sweep_here(*SEARCH, "hydra.sweeper.sampler=grid", "hydra.sweeper.n_trials=9", "optim.lr=0.01",
                        "model.dropout=0.1", "enc_sizes=choice([8],[4])", "activation=choice(relu,gelu)")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "grid sampler: 4 of the grid's 4 points left to run; 4 trial(s)" in result.stdout
    assert sorted(r["overrides"] for r in read_summary(tmp_path / "sweep")) == [
        "enc_sizes=[4] activation=gelu", "enc_sizes=[4] activation=relu",
        "enc_sizes=[8] activation=gelu", "enc_sizes=[8] activation=relu"]


@pytest.mark.parametrize(("args", "message"), [
    (["hydra.sweeper.sampler=tpee"], "error: hydra.sweeper.sampler: unknown sampler 'tpee'\n  did you mean 'tpe'?"),
    (["hydra.sweeper.pruner=median", "hydra/launcher=joblib"], "error: hydra.sweeper.pruner: median: pruning needs"),
    (["hydra.sweeper.storage=redis://localhost/0"], "error: hydra.sweeper.storage: 'redis://localhost/0' is not a "
                                                    "storage Optuna can open\n  allowed: sqlite:///FILE"),
    (["hydra.sweeper.directions=[maximize,minimize]"], "error: hydra.sweeper.objectives: 2 directions"),
    (["hydra.sweeper.n_trials=-1"], "error: hydra.sweeper.n_trials: must be 0 or more, got -1"),
    (["model.dropout=interval(0.0, 0.5)", "hydra.sweeper.sampler=grid"],
     "error: hydra.sweeper.params.optim.lr: the grid sampler needs a finite set of values"),
])
def test_a_bad_setting_is_refused_before_the_sweep_dir(sweep_here, tmp_path: Path, args: list[str], message: str) -> None:
    result = sweep_here(*SEARCH, *args)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr
    if "grid" not in message:  # the search space is known when the sweep starts: its dir is made by then
        assert not (tmp_path / "sweep").exists()


def test_an_objective_no_run_records_stops_the_search(sweep_here, tmp_path: Path) -> None:
    result = sweep_here(*SEARCH, "hydra.sweeper.objectives=[val/acc,flops]", "hydra.sweeper.directions=[maximize,minimize]")
    assert result.returncode == 2
    assert result.stderr.startswith("error: hydra.sweeper.objectives: the runs record no number 'flops'")
    assert "macs" in result.stderr and "params" in result.stderr  # what they do record
    study = optuna.load_study(study_name="modelforge", storage=f"sqlite:///{tmp_path}/sweep/optuna.db")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]  # not left running


def test_a_continued_study_keeps_its_search_space(sweep_here, tmp_path: Path) -> None:
    first = sweep_here(*SEARCH, "hydra.sweeper.n_trials=1")
    assert first.returncode == 0, first.stderr[-2000:]
    again = sweep_here(*SEARCH, "hydra.sweeper.n_trials=1", "enc_sizes=choice([8],[4])")
    assert again.returncode == 2
    assert again.stderr.startswith("error: hydra.sweeper.params.enc_sizes: study 'modelforge' searched it as "
                                   "CategoricalDistribution(choices=('[16]', '[32,64]', '[32,64,128]'))")
    assert "hint: keep the stored search space, or start a new study" in again.stderr
    assert len(read_summary(tmp_path / "sweep")) == 1


def test_a_journal_study_in_the_sweep_dir_is_continued(sweep_here, tmp_path: Path) -> None:
    journal = ["hydra.sweeper.storage=journal:${hydra.sweep.dir}/study.log", "hydra.sweeper.n_trials=1"]
    assert sweep_here(*SEARCH, *journal).returncode == 0
    again = sweep_here(*SEARCH, *journal)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "continuing Optuna study 'modelforge': 1 trials stored, 1 more to run" in again.stdout
    assert sorted(r["job"].split("_")[0] for r in read_summary(tmp_path / "sweep")) == ["0", "1"]
