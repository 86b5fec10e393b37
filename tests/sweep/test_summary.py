"""The sweep summary table, built from hand-written ``metrics.json`` files."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import DictConfig, OmegaConf

from modelforge.errors import ConfigError
from modelforge.sweep.callback import (
    BASIC_SWEEPER,
    SweepSummary,
    exit_if_jobs_failed,
    planned_jobs,
    record_failure,
    report_unfinished_sweeps,
)
from modelforge.sweep.summary import (
    JobRow,
    format_markdown,
    format_text,
    one_line,
    pareto_front,
    read_rows,
    short_floats,
    sort_rows,
    swept_overrides,
    table,
    write_summary,
)

FIXED = ["model=cnn", "trainer.fast_dev_run=true"]  # the command line of the `sweep` fixture's jobs


def write_job(sweep: Path, job: str, **metrics: object) -> Path:
    folder = sweep / job
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"monitor": "val/acc", **metrics}))
    return folder


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    common = ["model=cnn", "trainer.fast_dev_run=True"]
    write_job(tmp_path, "0", status="finished", overrides=[*common, "enc_sizes=[16]"],
              **{"val/acc": 0.90, "test/acc": 0.91, "params": 1000, "train_time_s": 12.5})
    write_job(tmp_path, "1", status="failed", overrides=[*common, "enc_sizes=[8,-1]"],
              error="ConfigError: model.enc_sizes[1]: must be positive, got -1\n  allowed: integers >= 1")
    write_job(tmp_path, "2", status="finished", overrides=[*common, "enc_sizes=[32,64]"],
              **{"val/acc": 0.97, "test/acc": 0.96, "params": 5000, "train_time_s": 30.0})
    write_job(tmp_path, "10", status="finished", overrides=[*common, "enc_sizes=[4]"],
              **{"val/acc": 0.50, "test/acc": 0.52, "params": 100, "train_time_s": 3.0})
    return tmp_path


def test_rows_sorted_best_first_failed_last(sweep: Path) -> None:
    assert [row.job for row in sort_rows(read_rows(sweep))] == ["2", "0", "10", "1"]


def test_loss_monitor_sorts_ascending() -> None:
    rows = [JobRow(str(i), {"status": "finished", "monitor": "val/loss", "val/loss": loss})
            for i, loss in enumerate([0.5, 0.1, 0.3])]
    assert [row.job for row in sort_rows(rows)] == ["1", "2", "0"]


def test_nan_and_running_rows_go_last() -> None:
    rows = [JobRow("0", {"status": "finished", "val/acc": float("nan")}), JobRow("1", {"status": "running"}),
            JobRow("2", {"status": "finished", "val/acc": 0.1})]
    assert [row.job for row in sort_rows(rows)] == ["2", "0", "1"]


def test_csv_holds_every_job_and_the_full_error(sweep: Path) -> None:
    write_summary(sweep, read_rows(sweep), FIXED)
    rows = list(csv.DictReader((sweep / "summary.csv").read_text().splitlines(keepends=True)))
    assert [r["job"] for r in rows] == ["2", "0", "10", "1"]
    assert [r["status"] for r in rows] == ["finished"] * 3 + ["failed"]
    assert rows[0]["overrides"] == "enc_sizes=[32,64]"  # what the sweep varied
    assert rows[0]["all_overrides"] == "model=cnn trainer.fast_dev_run=True enc_sizes=[32,64]"
    assert float(rows[0]["val/acc"]) == 0.97 and rows[0]["params"] == "5000"
    assert rows[3]["error"].startswith("ConfigError: model.enc_sizes[1]: must be positive")
    assert "allowed: integers >= 1" in rows[3]["error"] and rows[3]["val/acc"] == ""


def test_markdown_table(sweep: Path) -> None:
    write_summary(sweep, read_rows(sweep), FIXED)
    lines = (sweep / "summary.md").read_text().splitlines()
    assert lines[0] == "| job | status | val/acc | test/acc | params | train_time_s | overrides | error |"
    assert lines[2] == "| 2 | finished | 0.9700 | 0.9600 | 5000 | 30.0 | enc_sizes=[32,64] |  |"
    assert lines[-1].startswith("| 1 | failed |  |  |  |  | enc_sizes=[8,-1] | ConfigError: model.enc_sizes[1]")
    assert "got -1; allowed: integers >= 1 |" in lines[-1]  # a multi-line error fits one cell
    assert len(lines) == 2 + 4


def test_text_table_lines_up(sweep: Path) -> None:
    text = format_text(read_rows(sweep), FIXED)
    header, rule, first = text.splitlines()[:3]
    assert header.split()[:4] == ["job", "status", "val/acc", "test/acc"]
    assert set(rule.replace(" ", "")) == {"-"} and first.split()[:3] == ["2", "finished", "0.9700"]


def test_fixed_overrides_match_as_hydra_reads_them() -> None:
    # The sweep's command line says `true`; Hydra writes the job's override as `True`.
    rows = [JobRow("0", {"overrides": ["trainer.fast_dev_run=True", "optim.lr=0.001"]})]
    assert swept_overrides(rows, fixed=["trainer.fast_dev_run=true", "optim.lr=1e-3,3e-3"]) == [["optim.lr=0.001"]]
    # Nothing swept (one value per key): the row shows what the job ran with.
    assert swept_overrides(rows, fixed=["trainer.fast_dev_run=true", "optim.lr=1e-3"]) == [rows[0].overrides]


def test_long_floats_are_shortened_in_tables_only() -> None:
    assert short_floats("optim.lr=0.0012520653814999472 enc_sizes=[16] x=0.5") == "optim.lr=0.001252 enc_sizes=[16] x=0.5"
    row = JobRow("0", {"status": "finished", "overrides": ["optim.lr=0.0012520653814999472"], "val/acc": 0.5})
    assert "optim.lr=0.001252 " in format_markdown([row], []) + " "


def test_other_monitor_gets_its_own_column() -> None:
    rows = [JobRow("0", {"status": "finished", "monitor": "val/loss", "val/loss": 0.2, "val/acc": 0.9})]
    assert format_markdown(rows, []).splitlines()[0].startswith("| job | status | val/loss | val/acc | test/acc |")


def test_unreadable_metrics_still_make_a_row(tmp_path: Path) -> None:
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "metrics.json").write_text("{not json")
    (row,) = read_rows(tmp_path)
    assert row.status == "unreadable" and "metrics.json" in row.error


def failed_return(exc: BaseException, overrides: list[str]) -> SimpleNamespace:
    return SimpleNamespace(_return_value=exc, overrides=overrides)


def test_record_failure_writes_metrics_for_a_job_that_failed_validation(tmp_path: Path) -> None:
    job = tmp_path / "1"
    record_failure(job, failed_return(ConfigError("model.enc_sizes[1]", "must be positive"), ["enc_sizes=[8,-1]"]))
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["overrides"] == ["enc_sizes=[8,-1]"]
    assert metrics["error"] == "ConfigError: model.enc_sizes[1]: must be positive"


def test_record_failure_marks_a_finished_file_failed_and_keeps_its_metrics(tmp_path: Path) -> None:
    job = write_job(tmp_path, "0", status="finished", overrides=["a=1"], **{"val/acc": 0.5})
    record_failure(job, failed_return(ConfigError("monitor", "the run logged no metric 'x'"), ["a=1"]))
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["val/acc"] == 0.5 and "no metric" in metrics["error"]


def test_record_failure_keeps_the_error_train_wrote(tmp_path: Path) -> None:
    job = write_job(tmp_path, "0", status="failed", error="RuntimeError: boom")
    record_failure(job, failed_return(RuntimeError("boom"), []))
    assert json.loads((job / "metrics.json").read_text())["error"] == "RuntimeError: boom"


def test_record_failure_leaves_an_earlier_runs_file_alone(tmp_path: Path) -> None:
    job = write_job(tmp_path, "0", status="finished", **{"val/acc": 0.5})
    before = (job / "metrics.json").read_text()
    record_failure(job, failed_return(ConfigError("hydra.run.dir", "already holds a run"), []),
                   started=(job / "metrics.json").stat().st_mtime + 10.0)
    assert (job / "metrics.json").read_text() == before


def test_a_sweep_without_jobs_gets_a_header_only_summary(tmp_path: Path) -> None:
    write_summary(tmp_path / "new", [], [])
    assert (tmp_path / "new" / "summary.csv").read_text().startswith("job,status,val/acc")
    assert list(csv.reader(io.StringIO((tmp_path / "new" / "summary.csv").read_text())))[1:] == []


@pytest.mark.parametrize(("text", "cell"), [
    ("ConfigError: model.enc_sizes[1]: must be positive, got -1\n  allowed: integers >= 1",
     "ConfigError: model.enc_sizes[1]: must be positive, got -1; allowed: integers >= 1"),
    ("DataError: files missing; downloading them failed:\n    http://a/: unreachable\n    http://b/: refused\n  hint: x",
     "DataError: files missing; downloading them failed: http://a/: unreachable; http://b/: refused; hint: x"),
    ("", ""),
])
def test_one_line_joins_an_error_for_a_table_cell(text: str, cell: str) -> None:
    assert one_line(text) == cell


def test_record_failure_keeps_a_diverged_status_train_wrote(tmp_path: Path) -> None:
    job = write_job(tmp_path, "0", status="diverged", error="Diverged: training diverged at step 3")
    record_failure(job, failed_return(RuntimeError("Diverged: training diverged at step 3"), []))
    assert json.loads((job / "metrics.json").read_text())["status"] == "diverged"


def multirun_config(sweep_dir: Path, task: list[str], **sweeper: object) -> DictConfig:
    """The parts of a composed multirun config that the callback reads."""
    return OmegaConf.create({"monitor": "val/acc", "hydra": {
        "sweep": {"dir": str(sweep_dir)}, "overrides": {"task": task},
        "sweeper": {"_target_": BASIC_SWEEPER, "params": None, **sweeper}}})


def test_a_stopped_grid_sweep_lists_the_jobs_that_never_ran(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = multirun_config(tmp_path, ["model=mlp", "model.hidden_sizes=[16],[8]", "seed=1,2"])
    assert planned_jobs(cfg) == [["model=mlp", "model.hidden_sizes=[16]", "seed=1"], ["model=mlp", "model.hidden_sizes=[16]", "seed=2"],
                                 ["model=mlp", "model.hidden_sizes=[8]", "seed=1"], ["model=mlp", "model.hidden_sizes=[8]", "seed=2"]]
    SweepSummary().on_multirun_start(cfg)
    write_job(tmp_path, "0", status="finished", overrides=planned_jobs(cfg)[0], **{"val/acc": 0.5})
    write_job(tmp_path, "1", status="terminated", overrides=planned_jobs(cfg)[1], error="stopped by SIGTERM")
    report_unfinished_sweeps()  # Hydra raised before on_multirun_end
    rows = list(csv.DictReader((tmp_path / "summary.csv").read_text().splitlines(keepends=True)))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "finished"), ("1", "terminated"), ("2", "not run"), ("3", "not run")]
    assert rows[2]["overrides"] == "model.hidden_sizes=[8] seed=1"
    assert "the sweep stopped early: job(s) 2, 3 never ran" in capsys.readouterr().out


def test_only_this_runs_failed_jobs_fail_a_continued_study(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_job(tmp_path, "0_aaaaaa", status="failed", error="RuntimeError: an earlier run's")
    (tmp_path / "optuna.db").touch()  # the stored study that this sweep continues
    cfg = multirun_config(tmp_path, ["hparams_search=optuna"], storage=f"sqlite:///{tmp_path}/optuna.db")
    callback = SweepSummary()
    callback.on_multirun_start(cfg)
    write_job(tmp_path, "1_bbbbbb", status="failed", error="RuntimeError: boom")
    write_job(tmp_path, "2_bbbbbb", status="finished", **{"val/acc": 0.5})
    callback.on_multirun_end(cfg)
    with pytest.raises(SystemExit, match="1"):
        exit_if_jobs_failed()
    err = capsys.readouterr().err
    assert f"error: 1 job(s) of the sweep in {tmp_path} failed: 1_bbbbbb " in err and "0_aaaaaa" not in err
    exit_if_jobs_failed()  # reported once


def test_pruned_rows_follow_the_finished_ones_by_their_last_value() -> None:
    rows = [JobRow("0", {"status": "pruned", "val/acc": 0.99}), JobRow("1", {"status": "finished", "val/acc": 0.5}),
            JobRow("2", {"status": "failed"}), JobRow("3", {"status": "pruned", "val/acc": 0.2}),
            JobRow("4", {"status": "finished", "val/acc": 0.7})]
    assert [row.job for row in sort_rows(rows)] == ["4", "1", "0", "3", "2"]


def test_a_pruned_job_does_not_fail_the_search(tmp_path: Path) -> None:
    cfg = multirun_config(tmp_path, ["hparams_search=optuna"])
    callback = SweepSummary()
    callback.on_multirun_start(cfg)
    write_job(tmp_path, "0_aaaaaa", status="finished", **{"val/acc": 0.9})
    write_job(tmp_path, "1_aaaaaa", status="pruned", **{"val/acc": 0.3}, stopped_by="pruner")
    callback.on_multirun_end(cfg)
    assert callback.failed == []
    exit_if_jobs_failed()  # no SystemExit


def test_the_pareto_front_of_several_objectives() -> None:
    values = {"0": (0.90, 1000), "1": (0.95, 5000), "2": (0.89, 2000), "3": (0.95, 4000), "4": (0.99, None)}
    rows = [JobRow(job, {"status": "finished", "val/acc": acc, **({"params": p} if p else {})})
            for job, (acc, p) in values.items()]
    rows.append(JobRow("5", {"status": "pruned", "val/acc": 0.99, "params": 10}))  # only finished runs compete
    objectives = [("val/acc", "maximize"), ("params", "minimize")]
    assert pareto_front(rows, objectives) == {"0", "3"}
    header, *lines = table(rows, [], objectives=objectives)
    assert header[:5] == ["job", "status", "pareto", "val/acc", "params"]
    assert {line[0] for line in lines if line[2] == "yes"} == {"0", "3"}
    assert "pareto" not in table(rows, [], objectives=objectives[:1])[0]  # one objective: its best row is first
