"""``python -m modelforge diff``: two jobs of a sweep over optim.lr differ by optim.lr, set by their overrides, and
show both runs' test metrics (exit 1); a run and its own checkpoint, or two runs of one config, are the same
experiment (exit 0); anything else is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SWEEP = ["model=mlp", "model.hidden_sizes=[8]", "optim.lr=0.01,0.03", "trainer.fast_dev_run=true"]
JOB_0 = ["model=mlp", "model.hidden_sizes=[8]", "optim.lr=0.01", "trainer.fast_dev_run=true"]  # its first job alone


@pytest.fixture
def lr_sweep(sweep_here, tmp_path: Path) -> Path:
    done = sweep_here(*SWEEP)
    assert done.returncode == 0, done.stderr[-2000:]
    return tmp_path / "sweep"


def test_two_jobs_of_a_sweep_over_the_learning_rate_differ_by_it(run_main, lr_sweep: Path) -> None:
    result = run_main("diff", str(lr_sweep / "0"), str(lr_sweep / "1"))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert "config: 1 key(s) differ" in lines
    (row,) = [line.split() for line in lines if line.strip().startswith("optim.lr ")]
    assert row == ["optim.lr", "0.01", "0.03", "optim.lr=0.01", "|", "optim.lr=0.03"]
    records = [json.loads((lr_sweep / job / "metrics.json").read_text()) for job in ("0", "1")]
    (test_loss,) = [line.split() for line in lines if line.strip().startswith("test/loss ")]
    assert [float(v) for v in test_loss[1:3]] == pytest.approx([r["test/loss"] for r in records], rel=1e-5)
    assert any(line.startswith("  test/acc ") for line in lines)
    assert "data: the same (" in result.stdout and "sha256" in result.stdout
    assert "torch " in result.stdout and "lightning " in result.stdout  # the environment, recorded by the runs
    assert lines[-1] == "different experiments: config differs"


def test_a_run_and_its_checkpoint_or_a_rerun_are_the_same_experiment(run_main, sweep_here, lr_sweep: Path,
                                                                     tmp_path: Path) -> None:
    ckpt = lr_sweep / "1" / "checkpoints" / "last.ckpt"
    same = run_main("diff", str(lr_sweep / "1"), str(ckpt))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "config: the same" in same.stdout and same.stdout.splitlines()[-1] == "the same experiment"

    again = sweep_here(*JOB_0, sweep_dir=tmp_path / "again")
    assert again.returncode == 0, again.stderr[-2000:]
    rerun = run_main("diff", str(lr_sweep / "0"), str(tmp_path / "again" / "0"))
    assert rerun.returncode == 0, rerun.stdout


@pytest.mark.parametrize("args, message", [
    (["nowhere", "."], "error: diff: nowhere: no such run directory or checkpoint file"),
    (["."], "error: diff: the following arguments are required: run_b"),
])
def test_bad_input_is_one_line_and_exit_2(run_main, args: list[str], message: str, tmp_path: Path) -> None:
    result = run_main("diff", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
