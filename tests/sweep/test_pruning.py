"""Pruning: the Lightning callback that reports to the trial and stops a pruned run, and a real pruned search."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import optuna
import torch

from modelforge.sweep.pruning import TrialPruning
from modelforge.train.run import callback_records
from tests.helpers.sweep_summary import read_summary


def fake_trainer(value: float, epoch: int, world_size: int = 1, decision: bool | None = None) -> SimpleNamespace:
    broadcast = (lambda obj, src=0: obj) if decision is None else (lambda obj, src=0: decision)
    return SimpleNamespace(sanity_checking=False, callback_metrics={"val/acc": torch.tensor(value)},
                           current_epoch=epoch, world_size=world_size, should_stop=False,
                           strategy=SimpleNamespace(broadcast=broadcast), callbacks=[])


def test_a_trial_worse_than_the_median_stops_its_run_at_the_end_of_the_validation() -> None:
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    good = study.ask()
    for step, value in enumerate([0.8, 0.9], start=1):
        good.report(value, step)
    study.tell(good, 0.9)
    callback = TrialPruning(study.ask(), "val/acc")
    trainer = fake_trainer(0.5, epoch=0)
    trainer.sanity_checking = True
    callback.on_validation_end(trainer, None)  # the sanity check reports nothing
    assert callback.validations == 0 and not trainer.should_stop
    trainer.sanity_checking, trainer.callbacks = False, [callback]
    callback.on_validation_end(trainer, None)
    assert trainer.should_stop and callback.pruned == {"epoch": 1, "step": 1, "value": 0.5}
    assert callback.trial.should_prune() and study.trials[1].intermediate_values == {1: 0.5}
    record = callback_records(trainer)
    assert record["status"] == "pruned" and record["stopped_early_epoch"] == 1
    assert record["stopped_early_reason"].endswith("after validation 1: val/acc 0.5000")


def test_a_ddp_rank_without_the_trial_follows_rank_0() -> None:
    follower = TrialPruning(None, "val/acc")
    trainer = fake_trainer(0.5, epoch=2, world_size=2, decision=True)  # rank 0 said: prune
    follower.on_validation_end(trainer, None)
    assert trainer.should_stop and follower.pruned["epoch"] == 3
    kept = fake_trainer(0.5, epoch=2, world_size=2, decision=False)
    TrialPruning(None, "val/acc").on_validation_end(kept, None)
    assert not kept.should_stop


def test_a_run_nobody_pruned_records_nothing() -> None:
    trainer = fake_trainer(0.5, epoch=0)
    trainer.callbacks = [TrialPruning(None, "val/acc")]
    assert callback_records(trainer) == {}


def test_a_pruned_trial_is_a_row_of_its_own_and_its_run_is_complete(sweep_here, tmp_path: Path) -> None:
    # A first trial that learns (lr 0.05), then two that cannot (lr 1e-9): the median of the first prunes them.
    common = ["hparams_search=optuna", "enc_sizes=choice([8])", "trainer.max_epochs=4", "data.batch_size=8",
              "trainer.limit_train_batches=3"]  # half an epoch of the tiny set: enough to learn something
    first = sweep_here(*common, "optim.lr=0.05", "hydra.sweeper.n_trials=1")
    assert first.returncode == 0, first.stderr[-2000:]
    result = sweep_here(*common, "optim.lr=1e-9", "hydra.sweeper.n_trials=2", "hydra.sweeper.pruner=median",
                        "+hydra.sweeper.pruner_options.n_startup_trials=1")
    assert result.returncode == 0, result.stderr[-2000:]  # a pruned job did what it was asked
    rows = {r["job"].split("_")[0]: r for r in read_summary(tmp_path / "sweep")}
    assert rows["0"]["status"] == "finished" and "pruned" in {rows["1"]["status"], rows["2"]["status"]}
    study = optuna.load_study(study_name="modelforge", storage=f"sqlite:///{tmp_path / 'sweep' / 'optuna.db'}")
    assert study.trials[0].intermediate_values  # a search without a pruner reports too: later ones compare
    for trial in study.trials[1:]:
        row = rows[str(trial.number)]
        assert row["status"] == trial.state.name.lower().replace("complete", "finished")
        if trial.state != optuna.trial.TrialState.PRUNED:
            continue
        run_dir = Path(row["run_dir"])
        metrics = json.loads((run_dir / "metrics.json").read_text())
        last = trial.intermediate_values[trial.last_step]
        assert trial.value == last == metrics["val/acc"] == float(row["val/acc"])  # its last value
        assert metrics["status"] == "pruned" and metrics["stopped_by"] == "pruner"
        assert metrics["epochs"] == metrics["stopped_early_epoch"] < 4 and "test/acc" not in metrics
        for name in ("config.yaml", "checkpoints/last.ckpt", "logs/metrics.csv", "train.log"):
            assert (run_dir / name).is_file(), name
        assert f"trial {trial.number} pruned after validation" in result.stdout + result.stderr
    assert "error" not in result.stderr.lower() and "Traceback" not in result.stderr
