"""Optuna's heartbeat in a stored study, in process: the settings checked, a journal that keeps heartbeats, a stale
trial failed and recorded in its job directory and its sweep's summary, retried when asked. (Real processes and a
real SIGKILL: test_dead_worker.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import optuna
import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from optuna.trial import TrialState

from modelforge import ConfigError
from modelforge.config import conf_dir
from modelforge.sweep.callback import OPTUNA_SWEEPER, check_sweep_dir
from modelforge.sweep.heartbeat import HEARTBEAT_ATTR, Heartbeat, ask, beating, fail_stale_trials, heartbeat_of
from modelforge.sweep.study import open_storage, search_settings
from tests.helpers.sweep_summary import read_summary


@pytest.mark.parametrize(("setting", "message"), [
    ({"heartbeat_interval": 0}, "hydra.sweeper.heartbeat_interval: must be whole seconds, 1 or more, or null; got 0"),
    ({"heartbeat_interval": 10, "grace_period": 10},
     "hydra.sweeper.grace_period: 10 s is not longer than the heartbeat interval (10 s): live trials would be "
     "failed between two heartbeats\n  hint: hydra.sweeper.grace_period=20, or null (twice the interval)"),
    ({"heartbeat_interval": None, "grace_period": 30},
     "hydra.sweeper.grace_period: has no effect without hydra.sweeper.heartbeat_interval"),
    ({"retry_stale_trials": -1}, "hydra.sweeper.retry_stale_trials: must be 0 or more, got -1"),
])
def test_a_bad_heartbeat_setting_is_named(setting: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        search_settings({"n_trials": 1, "heartbeat_interval": 60, **setting}, "val/acc", None)
    assert str(info.value) == message


def test_the_default_heartbeat_is_for_stored_studies_only() -> None:
    shipped = OmegaConf.structured(optuna_conf())
    assert (shipped.heartbeat_interval, shipped.grace_period, shipped.retry_stale_trials) == (60, None, 0)
    in_memory = search_settings(shipped, "val/acc", None)
    assert heartbeat_of(in_memory) is None
    stored = search_settings({**OmegaConf.to_container(shipped), "storage": "journal:/tmp/j.log"}, "val/acc", None)
    assert heartbeat_of(stored) == Heartbeat(60, None, 0) and heartbeat_of(stored).grace == 120


def optuna_conf():
    from hydra_plugins.modelforge_optuna_sweeper.config import OptunaSweeperConf

    return OptunaSweeperConf


def journal_study(tmp_path: Path, heartbeat: Heartbeat) -> optuna.Study:
    storage = open_storage(f"journal:{tmp_path / 'study.log'}", heartbeat=heartbeat)
    return optuna.create_study(storage=storage, study_name="s", load_if_exists=True)


def test_a_journal_keeps_heartbeats_and_fails_the_silent_trial_only(tmp_path: Path) -> None:
    study = journal_study(tmp_path, Heartbeat(1, 3))
    silent, alive, never = (ask(study) for _ in range(3))
    with beating(study, [silent, alive]):  # Optuna's heartbeat thread records one as it starts
        pass
    beats = {t.number: t.system_attrs.get(HEARTBEAT_ATTR) for t in study.get_trials()}
    assert beats[silent.number] is not None and beats[never.number] is None
    study._storage.set_trial_system_attr(silent._trial_id, HEARTBEAT_ATTR, time.time() - 10)  # its worker died 10 s ago

    fail_stale_trials(journal_study(tmp_path, Heartbeat(1, 3)))  # another worker of the study looks
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {silent.number: TrialState.FAIL, alive.number: TrialState.RUNNING,
                      never.number: TrialState.RUNNING}  # a trial without a heartbeat is never stale (as Optuna's RDB)


def test_a_stale_trial_is_recorded_in_its_job_and_its_sweeps_summary(tmp_path: Path) -> None:
    sweep_dir, job = tmp_path / "sweep", tmp_path / "sweep" / "0_abc123"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("- optim.lr=0.01\n- model=mlp\n")
    (sweep_dir / "1_def456").mkdir()
    (sweep_dir / "1_def456" / "metrics.json").write_text(json.dumps(
        {"status": "finished", "val/acc": 0.5, "overrides": ["optim.lr=0.02", "model=mlp"]}))
    (sweep_dir / "multirun.yaml").write_text(yaml.safe_dump({
        "monitor": "val/acc", "hydra": {"overrides": {"task": ["model=mlp"]},
                                        "sweeper": {"_target_": OPTUNA_SWEEPER, "objectives": None}}}))
    study = journal_study(tmp_path, Heartbeat(1, 2))
    trial = ask(study, {"optim.lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)})
    trial.set_user_attr("run_dir", str(job))
    study._storage.set_trial_system_attr(trial._trial_id, HEARTBEAT_ATTR, time.time() - 10)

    fail_stale_trials(study)
    record = json.loads((job / "metrics.json").read_text())
    assert record == {"status": "failed", "trial": trial.number, "overrides": ["optim.lr=0.01", "model=mlp"],
                      "run_dir": str(job), "error": "WorkerLost: its worker stopped without a word: no heartbeat for "
                      "over 2 s (killed, or its machine lost); Optuna's heartbeat failed the trial"}
    rows = {row["job"]: row for row in read_summary(sweep_dir)}
    assert rows["0_abc123"]["status"] == "failed" and rows["0_abc123"]["overrides"] == "optim.lr=0.01"
    assert rows["1_def456"]["status"] == "finished"


def test_a_stale_trial_is_run_again_when_asked(tmp_path: Path) -> None:
    study = journal_study(tmp_path, Heartbeat(1, 2, retries=1))
    lr = optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)
    trial = ask(study, {"lr": lr})
    study._storage.set_trial_system_attr(trial._trial_id, HEARTBEAT_ATTR, time.time() - 10)
    fail_stale_trials(study)
    again = ask(study, {"lr": lr})  # the waiting copy is asked first, with the dead trial's parameters
    assert again.number == trial.number + 1 and again.params == trial.params
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.RUNNING]


def test_a_worker_continues_its_shared_study_in_its_own_directory(tmp_path: Path) -> None:
    def composed(study_name: str):
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            return compose("train", return_hydra_config=True, overrides=[
                "hparams_search=optuna", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                f"hydra.sweeper.storage=journal:{tmp_path / 'shared' / 'study.log'}",
                f"hydra.sweeper.study_name={study_name}"])

    (tmp_path / "sweep" / "0_abc123").mkdir(parents=True)
    (tmp_path / "sweep" / "0_abc123" / "metrics.json").write_text("{}")
    (tmp_path / "sweep" / "multirun.yaml").write_text(OmegaConf.to_yaml(composed("shared")))
    check_sweep_dir(composed("shared"))  # its own study, stored elsewhere: continued
    with pytest.raises(ConfigError, match="already holds a sweep"):
        check_sweep_dir(composed("another"))


def test_a_database_storage_keeps_optunas_own_heartbeat(tmp_path: Path) -> None:
    from optuna.storages._heartbeat import is_heartbeat_enabled

    from modelforge.sweep.heartbeat import StaleTrialRecord

    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat=Heartbeat(5, 12))
    assert is_heartbeat_enabled(storage)
    assert (storage.heartbeat_interval, storage.grace_period) == (5, 12)
    assert isinstance(storage.heartbeat_stale_trial_callback, StaleTrialRecord)
    assert not is_heartbeat_enabled(open_storage(f"sqlite:///{tmp_path / 'other.db'}"))
