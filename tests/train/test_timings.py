"""A run's set-up time (``time: N s to train()``, ``timings.before_train_s``): the process's age for its first run,
the time since the run before it ended for a later one (a sweep's next job), never the sweep process's age."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from modelforge.report import timings
from modelforge.report.timings import EXEC_AT_VAR, Phases, process_age_s
from tests.conftest import run_cli
from tests.helpers.run_config import tiny_cli_args


def test_the_first_run_of_a_process_counts_from_its_start_a_later_one_from_the_last_run_s_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timings, "_previous_run_end", None)  # as in a fresh process
    first = Phases()
    assert first.first_in_process and first.before_train_s == pytest.approx(process_age_s(), abs=0.5)
    first.end("fit")
    first.close()
    time.sleep(0.2)  # a sweep composing its next job
    second = Phases()
    assert not second.first_in_process
    assert 0.2 <= second.before_train_s < 1.0 < process_age_s()
    second.end("fit")
    assert second.line().startswith(f"time: {second.before_train_s:.2f} s to train() (composition, checks), fit ")
    assert first.line().startswith("time: ") and "(imports, composition, checks)" in first.line()


@pytest.mark.e2e
def test_a_fresh_multirun_reports_each_job_s_own_set_up_time_and_no_font_cache_line(tiny_mnist: Path,
                                                                                   tmp_path: Path) -> None:
    """Two quiet-console points in one process of its own: a sweep's job 1 reports its own set-up time, not the
    sweep's age; a fresh HOME (no matplotlib cache: Lightning's import of torchmetrics builds it, before the job)
    prints no 'generated new fontManager'."""
    home = tmp_path / "home"
    result = run_cli("train", "-m", "model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=1",
                     "optim.lr=1e-3,1e-2", *tiny_cli_args(tiny_mnist), f"hydra.sweep.dir={tmp_path / 'sweep'}",
                     cwd=tmp_path, env={"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "MPLCONFIGDIR": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = [json.loads((tmp_path / "sweep" / str(k) / "metrics.json").read_text())["timings"] for k in (0, 1)]
    # The sweep process's age when job 1 starts is at least job 0's set-up and all its phases: job 1 took less.
    assert jobs[1]["before_train_s"] < sum(jobs[0].values())
    logs = [(tmp_path / "sweep" / str(k) / "train.log").read_text() for k in (0, 1)]
    assert "s to train() (imports, composition, checks), prepare" in logs[0]
    assert f"time: {jobs[1]['before_train_s']:.2f} s to train() (composition, checks), prepare" in logs[1]
    assert list((home / ".cache" / "matplotlib").glob("fontlist-*.json")), "the font cache was built in this run"
    assert "fontManager" not in result.stdout + result.stderr and "font cache" not in result.stdout + result.stderr


def test_a_command_that_run_py_execd_is_timed_from_the_exec_not_from_run_pys_installs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """run.py execs the command after its first-use installs; the exec'd process keeps run.py's start time."""
    monkeypatch.setenv(EXEC_AT_VAR, repr(time.time() - 1.0))
    assert process_age_s() == pytest.approx(1.0, abs=0.3)
    monkeypatch.setenv(EXEC_AT_VAR, repr(time.time() - 10_000))  # an older exec: a child of the command is younger
    assert process_age_s() < 10_000 - 1
