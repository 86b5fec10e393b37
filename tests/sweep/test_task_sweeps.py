"""Sweeps of a task beyond classification (tiny generated MNIST, real Hydra composition and Lightning Trainer): a
multirun's summary and an Optuna search follow the task's main metric, in its direction (val/mae: smaller is
better; val/iou: larger)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from tests.helpers.sweep_summary import read_summary

DERIVED = ("data.n_train=48", "data.n_test=16", "trainer.max_epochs=1")  # derived from the tiny IDX set's 64 images
# One batch each way: the summary ranks whatever the runs record (fast_dev_run would record no best_val/...).
ONE_BATCH = ("trainer.limit_train_batches=1", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1")


def test_an_optuna_search_of_a_regression_minimizes_its_mae(sweep_here, tmp_path: Path) -> None:
    result = sweep_here("hparams_search=recipe", "task=regress", "model=cnn", "enc_sizes=[4]", "dec_sizes=[8]",
                        *DERIVED, *ONE_BATCH, "hydra.sweeper.n_trials=2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "minimize val/mae" in result.stdout
    study = optuna.load_study(study_name="modelforge", storage=f"sqlite:///{tmp_path}/sweep/optuna.db")
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    rows = read_summary(tmp_path / "sweep")
    maes = {r["job"]: float(r["val/mae"]) for r in rows}
    recorded = [json.loads((Path(r["run_dir"]) / "metrics.json").read_text())["best_val/mae"] for r in rows]
    assert sorted(study.trials, key=lambda t: t.value)[0].value == min(recorded) == min(maes.values())
    assert rows[0]["val/mae"] == min(r["val/mae"] for r in rows)  # best first: the smallest error


def test_a_segmentation_multirun_ranks_by_iou(sweep_here, tmp_path: Path) -> None:
    result = sweep_here("task=segment", "model=unet", "enc_sizes=[4,8]", *DERIVED, *ONE_BATCH, "optim.lr=1e-3,3e-2")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = read_summary(tmp_path / "sweep")
    assert len(rows) == 2 and list(rows[0])[:3] == ["job", "status", "val/iou"], list(rows[0])
    ious = [float(r["val/iou"]) for r in rows]
    assert ious == sorted(ious, reverse=True)  # best first: the largest IoU
