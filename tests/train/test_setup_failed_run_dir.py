"""A run directory whose run failed before training (missing data) is taken over by the next run there; a directory
that holds more is refused with a hint that fits what it holds (no resume hint without a checkpoint)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from modelforge.errors import ConfigError
from modelforge.train.records import CLAIM_FILE, check_run_dir, claim_run_dir
from tests.helpers.run_config import TINY

QUICK = ("model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=1", "trainer.limit_train_batches=2", "sched=none")


def _fail_at_setup(run_main, run: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir(exist_ok=True)
    result = run_main("train", f"data.data_dir={tmp_path / 'empty'}", *TINY, *QUICK, f"hydra.run.dir={run}")
    assert result.returncode == 2 and "MNIST files missing" in result.stderr, result.stderr
    assert json.loads((run / "metrics.json").read_text())["stage"] == "setup"


def test_the_same_command_with_its_data_fixed_runs_in_the_directory(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _fail_at_setup(run_main, run, tmp_path)
    assert sorted(p.name for p in run.iterdir()) == [".hydra", CLAIM_FILE, "metrics.json", "train.log"]

    result = run_main("train", f"data.data_dir={tiny_mnist}", *TINY, *QUICK, f"hydra.run.dir={run}")
    assert result.returncode == 0, result.stderr
    assert "resume with" not in result.stderr
    assert result.stderr.startswith(f"note: {run} held only the record of a run that failed before training "
                                    "(DataError: MNIST files missing from data_dir"), result.stderr
    assert result.stderr.rstrip().endswith("this run takes the directory over")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished" and "stage" not in metrics
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert not list(run.glob(".setup_failure*"))  # the old record is gone, not left beside the new one


@pytest.mark.parametrize(("extra", "hint"), [
    ("checkpoints/last.ckpt", "pick a new directory, or resume with ckpt_path={run}/checkpoints/last.ckpt"),
    ("config.yaml", "pick a new directory (it holds no last.ckpt to resume from)"),
    ("logs/metrics.csv", "pick a new directory (it holds no last.ckpt to resume from)"),
])
def test_a_directory_with_more_than_a_setup_failure_is_refused_with_a_hint_that_fits(tmp_path: Path, extra: str,
                                                                                     hint: str) -> None:
    run = tmp_path / "run"
    (run / extra).parent.mkdir(parents=True, exist_ok=True)
    (run / extra).write_text("")
    (run / "metrics.json").write_text(json.dumps({"status": "failed", "stage": "setup", "error": "DataError: x"}))
    (run / CLAIM_FILE).write_text("{}")
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    with pytest.raises(ConfigError) as info:
        claim_run_dir(run)
    assert f"it is left untouched: {hint.format(run=run)}" in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before


def test_a_stopped_run_hints_the_checkpoint_its_record_names(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "interrupted.ckpt").write_text("")
    resume = f"ckpt_path={tmp_path / 'checkpoints' / 'interrupted.ckpt'}"
    (tmp_path / "metrics.json").write_text(json.dumps({"status": "terminated", "resume_with": resume}))
    with pytest.raises(ConfigError, match=f"pick a new directory, or resume with {resume} "):
        check_run_dir(tmp_path, "train")


def test_of_many_runs_taking_one_over_at_once_exactly_one_gets_it(tmp_path: Path) -> None:
    run, barrier = tmp_path / "D", threading.Barrier(12)
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"status": "failed", "stage": "setup", "error": "DataError: x"}))
    (run / CLAIM_FILE).write_text(json.dumps({"pid": 1, "host": "h", "claimed_at": "then"}))
    outcomes: list[str] = []

    def claim() -> None:
        barrier.wait()
        try:
            claim_run_dir(run)
            outcomes.append("claimed")
        except ConfigError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=claim) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("claimed") == 1, outcomes
    assert all(o == "claimed" or o.startswith(f"run_dir: {run} is taken by another run") for o in outcomes), outcomes
    assert sorted(p.name for p in run.iterdir()) == [CLAIM_FILE]  # the new claim alone: the old record is gone
