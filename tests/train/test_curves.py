"""The pictures a run leaves: learning curves after train (and each sweep job), a confusion matrix after eval."""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from modelforge.report.learning_curves import CURVES_FILE, read_metrics_csv, write_learning_curves
from modelforge.train import evaluate, train
from tests.helpers.run_config import compose_train, tiny_cli_args
from tests.helpers.tmpfs import mount_tmpfs

PNG = b"\x89PNG\r\n\x1a\n"
MLP = ("model=mlp", "model.hidden_sizes=[16]")


@pytest.fixture(scope="module")
def two_epochs(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-epoch run (128 training images in batches of 32: 4 steps an epoch) that draws its curves."""
    run_dir = tmp_path_factory.mktemp("curves")
    train(compose_train(tiny_mnist, *MLP, "trainer.max_epochs=2", "curves=true"), run_dir=run_dir)
    return run_dir


def test_a_run_leaves_its_learning_curves_and_says_where(two_epochs: Path) -> None:
    picture = two_epochs / CURVES_FILE
    assert picture.read_bytes()[:8] == PNG
    assert json.loads((two_epochs / "metrics.json").read_text())["learning_curves"] == str(picture)
    assert f"learning curves: {picture}" in (two_epochs / "train.log").read_text()
    assert not [p for p in two_epochs.iterdir() if p.name.endswith(".tmp")]


def test_the_curves_are_drawn_from_what_the_run_logged(two_epochs: Path) -> None:
    logged = read_metrics_csv(two_epochs / "logs" / "metrics.csv")
    assert logged.epoch_ends == {0: 4, 1: 8}  # steps taken when each epoch ended
    assert {"train/loss_step", "train/loss_epoch", "val/loss", "train/acc", "val/acc"} <= set(logged.series)
    assert logged.lr_columns() == ["lr-Adam"]  # the one-cycle schedule's lr, step by step
    assert logged.points("train/loss_step")[0] == [1, 2, 3, 4, 5, 6, 7, 8]  # log_every_n_steps=1
    metrics = json.loads((two_epochs / "metrics.json").read_text())
    assert logged.points("val/acc") == ([4, 8], [pytest.approx(logged.series["val/acc"][0][1]), metrics["val/acc"]])


def test_read_metrics_csv_keeps_finite_values_by_step(tmp_path: Path) -> None:
    (tmp_path / "m.csv").write_text("epoch,lr-SGD,step,train/loss_epoch,train/loss_step,val/acc\n"
                                    ",0.1,0,,,\n0,,0,,nan,\n0,,1,,0.5,\n0,,1,,,0.75\n0,,1,0.6,,\n1,,3,0.4,,\n")
    logged = read_metrics_csv(tmp_path / "m.csv")
    assert logged.series == {"lr-SGD": [(1, 0.1)], "train/loss_step": [(2, 0.5)], "val/acc": [(2, 0.75)],
                             "train/loss_epoch": [(2, 0.6), (4, 0.4)]}
    assert logged.epoch_ends == {0: 2, 1: 4}


def test_without_a_csv_logger_no_curves_and_it_says_why(tiny_mnist: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    train(compose_train(tiny_mnist, *MLP, "trainer.max_epochs=1", "logger=[]", "curves=true"), run_dir=tmp_path)
    assert not (tmp_path / CURVES_FILE).exists()
    assert "learning curves: none drawn, as the run kept no logs/metrics.csv (logger=csv writes it)" in caplog.text
    assert "learning_curves" not in json.loads((tmp_path / "metrics.json").read_text())


def test_fast_dev_run_says_it_turned_the_loggers_off(tiny_mnist: Path, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    train(compose_train(tiny_mnist, *MLP, "trainer.fast_dev_run=true", "curves=true"), run_dir=tmp_path)  # logger=csv
    assert "learning curves: none drawn, as trainer.fast_dev_run turns the loggers off" in caplog.text
    assert "kept no logs/metrics.csv" not in caplog.text and not (tmp_path / CURVES_FILE).exists()


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="mounting a tmpfs needs root on Linux")
def test_curves_that_do_not_fit_on_the_disk_are_a_warning_and_leave_no_file(two_epochs: Path, tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    disk = tmp_path / f"disk_{uuid.uuid4().hex[:6]}"
    mount_tmpfs(disk, "16k")  # the metrics.csv fits, a picture does not
    try:
        (disk / "logs").mkdir()
        csv_text = (two_epochs / "logs" / "metrics.csv").read_text()
        (disk / "logs" / "metrics.csv").write_text(csv_text)
        with caplog.at_level(logging.WARNING):
            assert write_learning_curves(disk) == {}
        found = re.search(rf"learning curves not written: no space left in {disk} to write learning_curves.png: it "
                          r"needs about ([0-9.]+) KB, ([0-9.]+) KB free", caplog.text)
        assert found and float(found[1]) > float(found[2])  # the picture's size, not what fitted before the disk filled
        assert sorted(p.name for p in disk.iterdir()) == ["logs"]  # no picture, no temp file
        assert (disk / "logs" / "metrics.csv").read_text() == csv_text
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_each_sweep_job_leaves_its_curves(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    result = run_main("train", "-m", *MLP, "trainer.max_epochs=1", "optim.lr=1e-3,1e-2", *tiny_cli_args(tiny_mnist),
                      "curves=true", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 0, result.stderr[-2000:]
    pictures = sorted((tmp_path / "sweep").glob(f"*/{CURVES_FILE}"))
    assert [p.parent.name for p in pictures] == ["0", "1"] and all(p.read_bytes()[:8] == PNG for p in pictures)


def test_eval_prints_the_accuracy_and_draws_the_confusion_matrix(two_epochs: Path, tiny_mnist: Path, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    cfg = compose_train(tiny_mnist, f"ckpt_path={two_epochs / 'checkpoints' / 'last.ckpt'}")
    metrics = evaluate(cfg, run_dir=tmp_path / "eval")
    record = json.loads((tmp_path / "eval" / "eval_metrics.json").read_text())
    counts = record["confusion_matrix"]
    assert len(counts) == 10 and all(len(row) == 10 for row in counts)
    assert sum(map(sum, counts)) == 64  # every test image once
    labels = gzip.decompress((tiny_mnist / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:]  # IDX: 8 header bytes
    assert [sum(row) for row in counts] == [labels.count(k) for k in range(10)]  # true class by row
    right = sum(counts[k][k] for k in range(10))
    assert right / 64 == pytest.approx(metrics["test/acc"])
    picture = tmp_path / "eval" / "confusion_matrix.png"
    assert picture.read_bytes()[:8] == PNG and record["confusion_matrix_png"] == str(picture)
    assert f"confusion matrix: {picture} ({right} of 64 test images right)" in caplog.text


def test_the_epoch_axis_maps_steps_to_epochs_past_its_ends_too() -> None:
    from modelforge.report.learning_curves import _epoch_axis, _linear

    assert _epoch_axis({0: 4, 1: 8}) == ([0.0, 4.0, 8.0], [0.0, 1.0, 2.0])
    assert _epoch_axis({2: 30, 3: 40}) == ([20.0, 30.0, 40.0], [2.0, 3.0, 4.0])  # a resumed run: from epoch 3's start
    assert _epoch_axis({}) is None
    to_epoch = _linear([0.0, 4.0, 8.0], [0.0, 1.0, 2.0])
    assert list(to_epoch([2.0, 8.0, 10.0, -2.0])) == [0.5, 2.0, 2.5, -0.5]  # the plot's margins, not flat


def test_eval_s_confusion_matrix_goes_to_its_own_run_directory_never_the_checkpoint_s(
        run_main, two_epochs: Path, tiny_mnist: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where it is written: eval's own run directory, outputs/eval/DATE/TIME_XXXXXX/ by default (the CLI's and,
    now, Python's: evaluate() without run_dir used outputs/train/), which eval prints; the run that trained the
    checkpoint is left as it was."""
    before = sorted(p.name for p in two_epochs.iterdir())
    result = run_main("eval", f"ckpt_path={two_epochs}", *tiny_cli_args(tiny_mnist), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (cli_png,) = (tmp_path / "outputs" / "eval").glob("*/*/confusion_matrix.png")
    assert f"confusion matrix: {cli_png.absolute()} (" in result.stdout
    assert f"run directory: {cli_png.parent.absolute()}" in result.stdout
    (tmp_path / "python").mkdir()
    monkeypatch.chdir(tmp_path / "python")
    evaluate(compose_train(tiny_mnist, f"ckpt_path={two_epochs}"))
    assert len(list((tmp_path / "python" / "outputs" / "eval").glob("*/*/confusion_matrix.png"))) == 1
    assert not (tmp_path / "python" / "outputs" / "train").exists()
    assert sorted(p.name for p in two_epochs.iterdir()) == before
