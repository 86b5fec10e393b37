"""A command is a sweep when ``-m`` says so, or when ``hydra.mode=MULTIRUN`` does: on the command line or in a
config of the user's. The CLI reads the mode from ``-m`` without Hydra's extra composition only where no config can
set it (modelforge.cli.app._mode_from_the_flag), so no shipped config may set it."""

from __future__ import annotations

from pathlib import Path

import yaml

from modelforge.config import conf_dir
from tests.helpers.sweep_summary import read_summary


def _sets_mode(path: Path) -> bool:
    text = path.read_text()
    node = yaml.safe_load(text) or {}
    if not isinstance(node, dict):
        return False
    if "@package hydra" in text.partition("\n")[0]:  # the file's keys are hydra's own
        return "mode" in node
    return isinstance(node.get("hydra"), dict) and "mode" in node["hydra"]


def test_no_shipped_config_sets_the_run_mode(tmp_path: Path) -> None:
    files = sorted(conf_dir().rglob("*.yaml"))
    assert len(files) > 50
    assert [str(p) for p in files if _sets_mode(p)] == []
    # the check reads both forms: a file of hydra's keys and a run config's hydra: section
    (tmp_path / "a.yaml").write_text("# @package hydra\nmode: MULTIRUN\n")
    (tmp_path / "b.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    assert _sets_mode(tmp_path / "a.yaml") and _sets_mode(tmp_path / "b.yaml")


def test_hydra_mode_on_the_command_line_sweeps_without_m(run_main, tmp_path: Path, tiny_args: list[str]) -> None:
    result = run_main("train", "hydra.mode=MULTIRUN", "model=cnn", "enc_sizes=[4],[8]", "trainer.fast_dev_run=true",
                      *tiny_args, f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(r["overrides"] for r in read_summary(tmp_path / "sweep")) == ["enc_sizes=[4]", "enc_sizes=[8]"]


def test_an_experiment_of_the_users_that_sets_multirun_sweeps_without_m(run_main, tmp_path: Path,
                                                                         tiny_args: list[str]) -> None:
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "two.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n      enc_sizes: '[4],[8]'\n")
    result = run_main("train", "--config-dir", str(tmp_path / "mine"), "experiment=two", "model=cnn",
                      "trainer.fast_dev_run=true", *tiny_args, f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(read_summary(tmp_path / "sweep")) == 2
