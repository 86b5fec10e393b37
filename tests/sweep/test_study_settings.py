"""``hydra.sweeper.*`` of an Optuna search, checked: names against fixed tables, options against Optuna's
signatures, objectives against directions, storage against the forms Optuna opens."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import optuna
import pytest

from modelforge.errors import ConfigError
from modelforge.sweep.study import (
    BASIC_LAUNCHER,
    check_storage_url,
    open_storage,
    search_settings,
    shown_url,
    storage_file,
)

JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"


def settings(monitor: str = "val/acc", launcher: str = BASIC_LAUNCHER, **sweeper: Any):
    return search_settings(sweeper, monitor, launcher)


def test_defaults_follow_the_monitor() -> None:
    one = settings()
    assert (one.objectives, one.directions, one.sampler, one.pruner) == (("val/acc",), ("maximize",), "tpe", "none")
    assert settings(monitor="val/loss").directions == ("minimize",)  # as the best checkpoint's mode


def test_several_objectives_default_to_nsga_ii_and_minimize_sizes() -> None:
    two = settings(objectives=["val/acc", "params"])
    assert two.directions == ("maximize", "minimize") and two.sampler == "nsgaii"
    assert settings(objectives=["val/acc", "macs"], directions=["maximize", "maximize"]).directions == ("maximize",) * 2


@pytest.mark.parametrize(("sweeper", "message"), [
    ({"sampler": "tpee"}, "hydra.sweeper.sampler: unknown sampler 'tpee'\n  did you mean 'tpe'?"),
    ({"pruner": "medain"}, "hydra.sweeper.pruner: unknown pruner 'medain'\n  did you mean 'median'?"),
    ({"direction": "maximise"}, "hydra.sweeper.directions: unknown direction 'maximise'\n  did you mean 'maximize'?"),
    ({"directions": ["maximize", "minimize"]}, "hydra.sweeper.objectives: 2 directions (maximize, minimize) for 1 "
                                               "objective(s) (val/acc)"),
    ({"direction": "maximize", "directions": ["maximize"]}, "set direction (one objective) or directions"),
    ({"objectives": ["val/acc", "params"], "pruner": "median"}, "Optuna prunes single-objective studies only"),
    ({"sampler_options": {"n_startup_trial": 3}}, "hydra.sweeper.sampler_options.n_startup_trial: TPESampler takes "
                                                  "no argument 'n_startup_trial'\n  did you mean 'n_startup_trials'?"),
    ({"pruner": "median", "pruner_options": {"seed": 1}}, "MedianPruner takes no argument 'seed'"),
])
def test_a_bad_setting_is_named(sweeper: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        settings(**sweeper)
    assert message in str(error.value)


def test_pruning_needs_the_trial_in_this_process() -> None:
    with pytest.raises(ConfigError, match="pruning needs each trial's run in the sweep's own process"):
        settings(pruner="median", launcher=JOBLIB)
    assert settings(pruner="none", launcher=JOBLIB).pruner == "none"


@pytest.mark.parametrize(("name", "cls"), [("tpe", optuna.samplers.TPESampler), ("random", optuna.samplers.RandomSampler),
                                           pytest.param("cmaes", optuna.samplers.CmaEsSampler, marks=pytest.mark.skipif(
                                               importlib.util.find_spec("cmaes") is None,
                                               reason="Optuna's CMA-ES sampler needs the cmaes package")),
                                           ("nsgaii", optuna.samplers.NSGAIISampler)])
def test_samplers_by_name_are_seeded(name: str, cls: type) -> None:
    chosen = settings(sampler=name, seed=3)
    draws = []
    for _ in range(2):  # the same seed draws the same points
        study = optuna.create_study(sampler=chosen.make_sampler(chosen.seed))
        draws.append([study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}).params["x"] for _ in range(3)])
    assert isinstance(study.sampler, cls) and draws[0] == draws[1]


def test_grid_sampler_gets_the_grid_and_options_reach_the_class() -> None:
    grid = settings(sampler="grid").make_sampler(0, {"a": [1, 2]})
    assert isinstance(grid, optuna.samplers.GridSampler)
    pruner = settings(pruner="median", pruner_options={"n_startup_trials": 2}).make_pruner()
    assert isinstance(pruner, optuna.pruners.MedianPruner) and pruner._n_startup_trials == 2
    with pytest.raises(ConfigError, match="hydra.sweeper.pruner_options: SuccessiveHalvingPruner refuses them"):
        settings(pruner="successive_halving", pruner_options={"reduction_factor": 1}).make_pruner()


@pytest.mark.parametrize("url", ["sqlite:///x.db", "postgresql://u:pw@host:5432/db", "postgresql+psycopg://u@h/db",
                                 "mysql+pymysql://u@h/db", "journal:/shared/study.log"])
def test_storage_forms_accepted(url: str) -> None:
    check_storage_url(url)


@pytest.mark.parametrize("url", ["redis://h/0", "study.db", "journal:", "oracle://u@h/db"])
def test_other_storage_is_refused_with_the_forms(url: str) -> None:
    with pytest.raises(ConfigError) as error:
        check_storage_url(url)
    assert str(error.value).startswith("hydra.sweeper.storage: ")


def test_password_is_masked_and_files_are_found() -> None:
    assert shown_url("postgresql://optuna:s3cret@db.lan:5432/studies") == "postgresql://optuna:***@db.lan:5432/studies"
    assert shown_url("postgresql://optuna@db.lan/studies") == "postgresql://optuna@db.lan/studies"
    assert storage_file("sqlite:///sweep/optuna.db") == Path("sweep/optuna.db")
    assert storage_file("journal:/shared/s.log") == Path("/shared/s.log")
    assert storage_file("postgresql://u@h/db") is None


def test_an_unreachable_database_or_a_missing_driver_is_one_message(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="(?s)hydra.sweeper.storage: .*driver is not installed.*pip install PyMySQL"):
        open_storage("mysql://u@127.0.0.1/db")  # MySQLdb, its default driver, is not installed
    with pytest.raises(ConfigError, match=r"cannot open postgresql://u:\*\*\*@127.0.0.1:9/db"):
        open_storage("postgresql://u:pw@127.0.0.1:9/db", attempts=1)


def test_journal_storage_needs_no_server(tmp_path: Path) -> None:
    storage = open_storage(f"journal:{tmp_path}/studies/s.log")
    study = optuna.create_study(storage=storage, study_name="s")
    study.tell(study.ask(), 1.0)
    again = optuna.load_study(storage=open_storage(f"journal:{tmp_path}/studies/s.log"), study_name="s")
    assert [t.value for t in again.trials] == [1.0]
