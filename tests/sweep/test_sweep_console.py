"""An Optuna search piped to a file: Optuna's lines are plain log lines, and no trial warns."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.console import console_problems
from tests.helpers.sweep_summary import read_summary


@pytest.mark.e2e
@pytest.mark.slow  # 11 s: test_console's piped train checks the same console rules by default
def test_a_piped_optuna_search_prints_no_colour_code_or_warning(cli, tiny_data: Path, tmp_path: Path) -> None:
    # 48 training images in batches of 16: 3 batches an epoch, fewer than log_every_n_steps (50).
    result = cli("train", "-m", "hparams_search=optuna", "hydra.sweeper.n_trials=2", "trainer.max_epochs=1",
                 "trainer.accelerator=cpu", f"data.data_dir={tiny_data}", "data.verify=false", "data.download=false",
                 "data.val_size=16", "data.batch_size=16", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert console_problems(result.stdout) == [] and console_problems(result.stderr) == []
    # Optuna's own line, formatted as Hydra's are (not by Optuna's colour handler).
    assert "][HYDRA] A new study created in RDB with name: modelforge" in result.stdout
    assert [row["status"] for row in read_summary(tmp_path / "sweep")] == ["finished", "finished"]
