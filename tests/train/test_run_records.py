"""Run records are never overwritten: eval and train refuse a directory holding a run, before Hydra writes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from modelforge.cli.run_checks import CheckEvalBeforeRun
from modelforge.config import conf_dir
from modelforge.errors import ConfigError
from modelforge.train import train
from modelforge.train.records import check_run_dir
from tests.helpers.run_config import compose_train, tiny_cli_args


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Content and modification time of every file, .hydra/ included."""
    return {str(p.relative_to(folder)): (hashlib.md5(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_eval_into_a_training_run_dir_is_refused_and_leaves_it_byte_for_byte(run_main, tiny_mnist: Path,
                                                                              tmp_path: Path) -> None:
    run = tmp_path / "run"
    trained = run_main("train", "model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=1", *tiny_cli_args(tiny_mnist),
                  f"hydra.run.dir={run}")
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert (run / ".hydra" / "overrides.yaml").is_file()
    before = _snapshot(run)

    result = run_main("eval", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", f"data.data_dir={tiny_mnist}",
                 f"hydra.run.dir={run}")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: hydra.run.dir: {run} already holds a run (metrics.json")
    assert "`eval` writes into a new directory of its own" in result.stderr
    assert "Traceback" not in result.stderr
    assert _snapshot(run) == before


def test_eval_s_callback_refuses_a_run_directory_whatever_set_it(tiny_mnist: Path, tmp_path: Path) -> None:
    """The callback itself, as Hydra calls it before making the directory (the config file may set hydra.run.dir)."""
    run = tmp_path / "run"
    train(compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[8]", "trainer.fast_dev_run=true"), run_dir=run)
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("eval", overrides=[f"hydra.run.dir={run}", f"ckpt_path={run}", f"data.data_dir={tiny_mnist}"],
                      return_hydra_config=True)
    before = _snapshot(run)
    try:
        with pytest.raises(SystemExit) as stopped:
            CheckEvalBeforeRun().on_run_start(cfg)
    finally:
        HydraConfig.instance().cfg = None  # it set Hydra's config, as run_job does: later runs here are not under Hydra
    assert stopped.value.code == 2
    assert _snapshot(run) == before
    with pytest.raises(ConfigError, match=r"already holds a run \(metrics.json, config.yaml"):
        check_run_dir(run, "train")
    check_run_dir(tmp_path / "new", "eval")  # a new directory is fine
