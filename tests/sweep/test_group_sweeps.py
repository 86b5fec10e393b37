"""A sweep over options of a group that declare sweeps of their own (`-m 'experiment=glob(*)'`) is refused with the
command that runs each: Hydra expands a sweep once, before any job, so each would have run as one job."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.helpers.sweep_summary import read_summary

QUICK = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
         "trainer.limit_test_batches=1"]


@pytest.fixture
def user_experiments(tmp_path: Path) -> Path:
    """A config folder with two one-job experiments and one that declares a sweep of two jobs."""
    folder = tmp_path / "conf" / "experiment"
    folder.mkdir(parents=True)
    header = "# @package _global_\ndefaults:\n  - override /model: mlp\nmodel:\n  hidden_sizes: [8]\n"
    (folder / "one.yaml").write_text(header)
    (folder / "two.yaml").write_text(header + "seed: 2\n")
    sweep = "hydra:\n  sweeper:\n    params:\n      model.hidden_sizes: '[4],[8]'\n"
    (folder / "widths.yaml").write_text(header + sweep)
    return tmp_path / "conf"


def test_the_shipped_experiments_are_refused_with_the_commands(run_main, tmp_path: Path) -> None:
    result = run_main("train", "-m", "experiment=glob(*)", "trainer.max_epochs=1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: experiment: activations and enc_sizes declare a sweep of their own (hydra.sweeper): in a sweep over "
        "experiment options each would run as one job, not as a sweep",
        "  hint: run each as a sweep of its own:",
        "    python -m modelforge train -m experiment=activations trainer.max_epochs=1",
        "    python -m modelforge train -m experiment=enc_sizes trainer.max_epochs=1",
        "  and the others together: python -m modelforge train -m experiment=fast,seed_cnn,speedrun "
        "trainer.max_epochs=1",
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_search_config_cannot_be_swept_over(run_main, tmp_path: Path) -> None:
    result = run_main("train", "-m", "hparams_search=optuna,architecture", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: hparams_search: optuna and architecture declare a sweep of their own")


def test_users_experiments_run_each_as_declared(run_main, sweep_here, user_experiments: Path, tmp_path: Path) -> None:
    config_dir = ["--config-dir", str(user_experiments)]
    result = sweep_here(*config_dir, "experiment=one,widths,two", *QUICK)
    assert result.returncode == 2, result.stderr
    assert "error: experiment: widths declares a sweep of its own (hydra.sweeper)" in result.stderr
    assert not (tmp_path / "sweep").exists()
    hint = result.stderr.splitlines()
    assert hint[1] == "  hint: run it as a sweep of its own:"
    assert hint[3].startswith(f"  and the others together: python -m modelforge train -m --config-dir "
                              f"{user_experiments} experiment=one,two trainer.max_epochs=1 ")

    # The command it names runs the experiment's own sweep: two jobs, one per width.
    named = shlex.split(hint[2])[3:]  # after `python -m modelforge`
    assert named[:5] == ["train", "-m", *config_dir, "experiment=widths"]
    ran = run_main(*named, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert sorted(r["overrides"] for r in read_summary(tmp_path / "sweep")) == ["model.hidden_sizes=[4]",
                                                                                 "model.hidden_sizes=[8]"]
    others = sweep_here(*config_dir, "experiment=one,two", *QUICK, sweep_dir=tmp_path / "others")  # not refused
    assert others.returncode == 0, others.stderr
    assert len(read_summary(tmp_path / "others")) == 2
