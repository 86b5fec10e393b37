"""A run's console is quiet by configuration: no third-party warning or notice, no escape codes in a
pipe, no line glued to a progress bar in a terminal, each Lightning line once from Python too."""

from __future__ import annotations

import csv
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from modelforge.train import train
from tests.conftest import REPO
from tests.helpers.console import console_problems, glued_log_records, run_in_terminal
from tests.helpers.mnist_idx import write_mnist_idx
from tests.helpers.run_config import compose_train


@pytest.fixture(scope="module")
def mnist_480(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """480 train images: with 32 for validation and batch 16, 28 steps per epoch."""
    folder = tmp_path_factory.mktemp("mnist_480")
    write_mnist_idx(folder, n_train=480, n_test=32)
    return folder


def _args(data: Path, run_dir: Path, *more: str) -> list[str]:
    """A short real run as a user types it: progress on, Lightning's log_every_n_steps left alone."""
    return ["model=mlp", "model.hidden_sizes=[16]", f"data.data_dir={data}", "data.verify=false",
            "data.download=false", "data.val_size=32", "data.batch_size=16", "trainer.accelerator=cpu",
            f"hydra.run.dir={run_dir}", *more]


@pytest.mark.e2e
def test_a_piped_run_prints_no_warning_escape_or_glued_line(cli, tiny_mnist: Path, tmp_path: Path) -> None:
    # 128 training images in batches of 16: 8 batches an epoch, fewer than log_every_n_steps (50).
    result = cli("train", *_args(tiny_mnist, tmp_path / "run", "trainer.max_epochs=2"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert console_problems(result.stdout) == [] and console_problems(result.stderr) == []
    assert result.stderr == ""
    assert "epoch 2/2 done in" in result.stdout and "test/acc" in result.stdout
    # The step interval became the epoch's 8 batches: the logger got the step loss once per epoch.
    rows = list(csv.DictReader((tmp_path / "run" / "logs" / "metrics.csv").read_text().splitlines(keepends=True)))
    assert [row["step"] for row in rows if row["train/loss_step"]] == ["7", "15"]


@pytest.mark.e2e
def test_fast_dev_run_prints_no_lightning_notice(cli, tiny_mnist: Path, tmp_path: Path) -> None:
    result = cli("train", *_args(tiny_mnist, tmp_path / "run", "trainer.fast_dev_run=true"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert console_problems(result.stdout + result.stderr) == []
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()  # still written, with its full state


@pytest.mark.e2e
def test_in_a_terminal_the_epoch_line_starts_its_own_line_above_the_bar(mnist_480: Path, tmp_path: Path) -> None:
    pytest.importorskip("rich")
    code, screen = run_in_terminal("train", *_args(mnist_480, tmp_path / "run", "trainer.max_epochs=2"), cwd=tmp_path)
    assert code == 0, screen[-3000:]
    assert "\x1b[" in screen and "━" in screen  # a Rich bar was drawn
    assert glued_log_records(screen) == []
    assert "warn" not in screen.lower() and "`Trainer.fit` stopped" not in screen
    # The first epoch's line, printed while the bar still drew, with that epoch's training loss.
    assert "epoch 1/2 done in" in screen and "epoch 2/2 done in" in screen
    first = screen[screen.index("epoch 1/2 done in"):].replace("\r", "").replace("\n", " ")
    assert "train/loss_epoch" in first[:200]


_PYTHON_RUN = """
import logging, sys
from pathlib import Path
from hydra import compose, initialize_config_dir
from modelforge.config import conf_dir
from modelforge.train import train  # Lightning is imported before logging is set up, as in a user's script

data, run_dir, verbose = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "verbose"
if verbose:
    logging.getLogger().setLevel(logging.DEBUG)
overrides = [f"data.data_dir={data}", "data.verify=false", "data.download=false", "data.val_size=32",
             "data.batch_size=32", "trainer.accelerator=cpu", "trainer.max_epochs=1", "model=mlp",
             "model.hidden_sizes=[16]"]
with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
    cfg = compose("train", overrides=overrides)
train(cfg, run_dir=run_dir / "first")
train(cfg, run_dir=run_dir / "second")
"""


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["quiet", pytest.param("verbose", marks=pytest.mark.slow)])  # verbose: 7 s more
def test_train_from_python_prints_each_lightning_line_once(tiny_mnist: Path, tmp_path: Path, mode: str) -> None:
    result = subprocess.run([sys.executable, "-c", _PYTHON_RUN, str(tiny_mnist), str(tmp_path), mode], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    stopped = "`Trainer.fit` stopped: `max_epochs=1` reached."
    if mode == "quiet":
        assert console_problems(result.stdout) == [] and result.stderr == ""
        assert out.count(stopped) == 0
    else:  # hydra.verbose's equivalent: Lightning's notices come back, through the run's handlers, once per run
        assert out.count(stopped) == 2 and result.stdout.count(stopped) == 2
    for run in ("first", "second"):
        log = (tmp_path / run / "train.log").read_text()
        assert log.count(stopped) == (mode == "verbose") and "epoch 1/1 done in" in log


def test_a_timer_stop_is_reported_by_modelforge(tiny_mnist: Path, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Lightning's own notice of it is held back with its other rank-zero notices."""
    cfg = compose_train(tiny_mnist, "callbacks=[timer]", "callbacks.timer.duration=00:00:00:01", "model=mlp",
                        "model.hidden_sizes=[16]", "trainer.max_epochs=100000", "sched=none")
    caplog.set_level(logging.INFO, logger="modelforge.train")
    train(cfg, run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["stopped_by"] == "timer"
    assert metrics["stopped_early_reason"].startswith("time limit reached after 0:00:0")
    assert f"timer: stopped after epoch {metrics['stopped_early_epoch']} of at most 100000" in caplog.text
