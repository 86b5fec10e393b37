"""A run directory that turns read-only while a run or an eval writes there, and a full disk while drawing: one
line per fault, exit 1, every file written before intact. Real processes and real mounts: the directory is
bind-mounted read-only over itself mid-run (root ignores chmod; files the run opened before keep their mount)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from modelforge.files.atomic import remove_dead_temps
from modelforge.files.write_faults import UnwritableError
from modelforge.report.confusion_matrix import write_confusion_matrix
from modelforge.train import train
from modelforge.train.records import write_metrics
from tests.conftest import child_env
from tests.helpers.mnist_idx import write_mnist_idx
from tests.helpers.run_config import compose_train, tiny_cli_args
from tests.helpers.tmpfs import mount_tmpfs

needs_root = pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0,
                                reason="mounting needs root on Linux (and root ignores chmod)")
MLP = ("model=mlp", "model.hidden_sizes=[16]")


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` read-only from now on, for files opened after this (a bind mount over itself, remounted ro)."""
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        result = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"a read-only remount is not permitted here: {result.stderr.strip()}")
        yield
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], check=False)  # never leave a mount behind


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "modelforge", *args], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} never appeared: {proc.communicate()[1][-2000:]}")
        time.sleep(0.01)


@needs_root
@pytest.mark.e2e
def test_a_run_directory_turned_read_only_mid_run_is_one_line_per_fault(tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _start("train", *MLP, "trainer.max_epochs=100000", *tiny_cli_args(tiny_mnist), f"hydra.run.dir={run}")
    _wait_for(run / "checkpoints" / "last.ckpt", proc)
    time.sleep(0.3)  # the rename is done: last.ckpt is whole
    with read_only(run):
        # read once nothing can replace them: an epoch's save may land between a read before and the remount
        kept = {p: p.read_bytes() for p in (run / "config.yaml", run / "checkpoints" / "last.ckpt")}
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err and "OSError" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    # The run's record could not be written either: said once, then the run's own fault, once.
    assert errors[0] == f"error: cannot write {run / 'metrics.json'}: Read-only file system", err[-3000:]
    assert re.fullmatch(rf"error: cannot write {run}/(logs/metrics\.csv|checkpoints/\S+\.ckpt): Read-only file "
                        r"system; the run stopped at step \d+; the files written before are kept", errors[1])
    assert len(errors) == 2
    assert "could not save the training state" not in out + err  # no interrupted.ckpt tried where none can be
    for path, data in kept.items():
        assert path.read_bytes() == data
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] > 0
    # A save under way when the remount lands keeps its temp file: no file can be removed from a read-only file
    # system. It is named by its dead writer, so the writers' sweep removes it once the folder is writable again.
    left = sorted(run.rglob("*.tmp"))
    swept = sorted(p for folder in {t.parent for t in left} for p in remove_dead_temps(folder))
    assert swept == left and not list(run.rglob("*.tmp")), "a temp file no writer's sweep removes"


@pytest.fixture(scope="module")
def trained(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("faults_run")
    train(compose_train(tiny_mnist, *MLP, "trainer.max_epochs=1"), run_dir=run_dir)
    return run_dir / "checkpoints" / "last.ckpt"


@needs_root
@pytest.mark.e2e
def test_eval_into_a_directory_turned_read_only_is_one_line_after_its_figures(trained: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_mnist_idx(data, n_train=64, n_test=3000)  # a test long enough to turn the directory read-only during it
    outer = tmp_path / "evals"
    outer.mkdir()
    run = outer / "eval"
    proc = _start("eval", f"ckpt_path={trained}", *tiny_cli_args(data), f"hydra.run.dir={run}")
    _wait_for(run / ".hydra" / "overrides.yaml", proc)  # Hydra has written its files: the job starts, not the test
    with read_only(outer):
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: cannot write {run / 'eval_metrics.json'}: Read-only file system; the figures printed above were "
        "measured but are not recorded"]
    assert re.search(r"test/acc\s+[0-9.]+", out)  # measured, and printed
    assert f"confusion matrix not written: cannot write {run / 'confusion_matrix.png'}: Read-only file system" \
        in out
    assert sorted(p.name for p in run.iterdir()) == [".hydra", ".run_claim", "eval.log"]


@needs_root
def test_a_confusion_matrix_that_does_not_fit_says_how_much_it_needs_and_how_much_is_free(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    disk = tmp_path / f"disk_{uuid.uuid4().hex[:6]}"
    mount_tmpfs(disk, "8k")
    try:
        counts = torch.arange(100).view(10, 10)
        with caplog.at_level(logging.WARNING):
            record = write_confusion_matrix(counts, disk)
        assert record == {"confusion_matrix": counts.tolist()}  # the counts are kept for eval_metrics.json
        found = re.search(rf"confusion matrix not written: no space left in {disk} to write confusion_matrix.png: "
                          r"it needs about ([0-9.]+) KB, ([0-9.]+) KB free; the files written before are kept",
                          caplog.text)
        assert found, caplog.text
        assert float(found[1]) > float(found[2])  # the picture's size, not what fitted before the disk was full
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@needs_root
def test_metrics_json_in_a_read_only_directory_is_one_line_printed_or_returned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    with read_only(run):
        assert write_metrics(run / "metrics.json", {"status": "failed"}, failing=True) is None  # printed
        assert capsys.readouterr().err == f"error: cannot write {run / 'metrics.json'}: Read-only file system\n"
        fault = write_metrics(run / "metrics.json", {"status": "finished"}, failing=False)  # for the caller to raise
    assert isinstance(fault, UnwritableError) and fault.exit_code == 1
    assert str(fault) == (f"cannot write {run / 'metrics.json'}: Read-only file system; the run finished (its "
                          "figures are printed above), but metrics.json does not record them")
    assert list(run.iterdir()) == []
