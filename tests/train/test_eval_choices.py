"""What ``eval`` tests, and what it refuses before testing: a run directory as ckpt_path, model options (refused in
every form), a data set chosen on the command line (honoured), data that does not fit the checkpoint's model (one
error, with a hint that never repeats the command). Real Hydra (in process), real checkpoints on tiny IDX data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelforge.train import train
from tests.helpers.mnist_idx import write_idx_set
from tests.helpers.run_config import compose_train, tiny_cli_args

MLP = ("model=mlp", "model.hidden_sizes=[16]")


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """28x28 images of 3 classes (bars), in the standard IDX names."""
    folder = tmp_path_factory.mktemp("three_classes")
    write_idx_set(folder, n_train=96, n_test=30, n_classes=3, size=(28, 28))
    return folder


@pytest.fixture(scope="module")
def mnist_run(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("mnist_run")
    train(compose_train(tiny_mnist, *MLP, "trainer.max_epochs=1"), run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def three_class_run(three_classes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("three_class_run")
    train(compose_train(three_classes, "data=idx", *MLP, "trainer.max_epochs=1"), run_dir=run_dir)
    return run_dir


def test_a_run_directory_as_ckpt_path_evaluates_its_last_checkpoint(run_main, mnist_run: Path, tiny_mnist: Path,
                                                                    tmp_path: Path) -> None:
    result = run_main("eval", f"ckpt_path={mnist_run}", *tiny_cli_args(tiny_mnist), f"hydra.run.dir={tmp_path / 'e'}")
    assert result.returncode == 0, result.stderr
    last = mnist_run / "checkpoints" / "last.ckpt"
    record = json.loads((tmp_path / "e" / "eval_metrics.json").read_text())
    assert record["ckpt_path"] == str(last)
    assert record["test/acc"] == pytest.approx(json.loads((mnist_run / "metrics.json").read_text())["test/acc"])
    assert f"evaluating {last} (the run's last checkpoint, the one its test metrics are of)" in result.stdout


@pytest.mark.parametrize("override", ["model=mlp", "+model=mlp", "model.dropout=0"])
def test_model_options_are_refused_in_every_form_with_a_hint_that_is_true(run_main, mnist_run: Path,
                                                                          tmp_path: Path, override: str) -> None:
    result = run_main("eval", f"ckpt_path={mnist_run}", override, f"hydra.run.dir={tmp_path / 'e'}")
    assert result.returncode == 2
    key = override.lstrip("+").split("=")[0]
    assert result.stderr == (f"error: {key}: `eval` rebuilds the model stored in the checkpoint (ckpt_path): it takes "
                             f"no model options\n  hint: another model: train it (python -m modelforge train "
                             f"{override.lstrip('+')} ...), then eval its checkpoint\n")
    assert not (tmp_path / "e").exists()


def test_a_three_class_checkpoint_on_mnist_is_one_error_before_testing(run_main, three_class_run: Path,
                                                                       three_classes: Path, tiny_mnist: Path,
                                                                       tmp_path: Path) -> None:
    # data=mnist is honoured (it was silently replaced by the run's data), and refused: its labels go up to 9.
    chosen = run_main("eval", f"ckpt_path={three_class_run}", "data=mnist", *tiny_cli_args(tiny_mnist),
                      "data.val_size=16", f"hydra.run.dir={tmp_path / 'chosen'}")
    # The run's own data set (idx) pointed at MNIST's files: the same refusal (it was IndexError: Target 7 ...).
    pointed = run_main("eval", f"ckpt_path={three_class_run}", *tiny_cli_args(tiny_mnist),
                       f"hydra.run.dir={tmp_path / 'pointed'}")
    for result, name in ((chosen, "mnist"), (pointed, "idx")):
        assert result.returncode == 2, result.stderr
        assert result.stderr == (
            f"error: data: data '{name}' has 10 classes (labels 0-9), but the checkpoint's model predicts 3\n"
            f"  hint: test it on data with at most 3 classes, e.g. the data it was trained on: data=idx "
            f"data.data_dir={three_classes}\n")
        assert not (tmp_path / name / "eval_metrics.json").exists()


def test_an_mnist_checkpoint_on_three_class_data_is_tested_as_chosen(run_main, mnist_run: Path, three_classes: Path,
                                                                     tmp_path: Path) -> None:
    result = run_main("eval", f"ckpt_path={mnist_run}", "data=idx", *tiny_cli_args(three_classes),
                      f"hydra.run.dir={tmp_path / 'e'}")
    assert result.returncode == 0, result.stderr
    assert "data 'idx' has 3 classes, the checkpoint's model predicts 10: a prediction of classes 3-9 counts as " \
           "wrong" in result.stdout
    counts = json.loads((tmp_path / "e" / "eval_metrics.json").read_text())["confusion_matrix"]
    assert len(counts) == 10 and sum(map(sum, counts)) == 30  # the 30 images of the 3-class set, not MNIST's 64
    assert sum(map(sum, counts[3:])) == 0  # true classes 0-2 only


def test_images_of_another_shape_are_refused_with_the_run_s_data_as_the_hint(run_main, mnist_run: Path,
                                                                            tiny_mnist: Path, tmp_path: Path) -> None:
    small = tmp_path / "small"
    write_idx_set(small, n_classes=3, size=(20, 20))
    result = run_main("eval", f"ckpt_path={mnist_run}", "data=idx", *tiny_cli_args(small),
                      f"hydra.run.dir={tmp_path / 'e'}")
    assert result.returncode == 2
    assert result.stderr == ("error: data: data 'idx' has images of shape [1, 20, 20], but the checkpoint's model "
                             f"takes [1, 28, 28]\n  hint: test it on images like those it was trained on: data=mnist "
                             f"data.data_dir={tiny_mnist}\n")


def test_a_validation_size_is_not_checked_against_data_eval_only_tests_on(run_main, mnist_run: Path,
                                                                          three_classes: Path, tmp_path: Path) -> None:
    """idx's val_size of 5,000 images splits training images eval never reads: 96 of them are no refusal."""
    result = run_main("eval", f"ckpt_path={mnist_run}", "data=idx", f"data.data_dir={three_classes}",
                      f"hydra.run.dir={tmp_path / 'e'}")
    assert result.returncode == 0, result.stderr
    counts = json.loads((tmp_path / "e" / "eval_metrics.json").read_text())["confusion_matrix"]
    assert sum(map(sum, counts)) == 30  # the 30 test images of the 3-class set
