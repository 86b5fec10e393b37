"""Bad input to ``train`` and ``eval`` (a checkpoint that cannot be read or does not fit, data the checkpoint's model
cannot be tested on) is refused before Hydra makes the run directory: exit 2, one line, nothing left behind (no
``outputs/``, no ``.hydra``, no claim, no log, no metrics.json)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from modelforge.deploy.export import export
from tests.conftest import child_env
from tests.helpers.mnist_idx import write_idx_set
from tests.helpers.run_config import tiny_cli_args


@pytest.fixture(scope="session")
def small_run(small_cnn_run: Path) -> Path:
    return small_cnn_run


@pytest.fixture(scope="module")
def bad_files(small_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad")
    crafted = folder / "crafted.ckpt"
    crafted.write_bytes(b"PK\x03\x04 not a checkpoint at all")
    exported = export(small_run, "pt2", folder / "model.pt2", check=False)
    return {"crafted": crafted, "exported": exported}


def _left(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.e2e
def test_eval_of_a_crafted_checkpoint_in_a_process_of_its_own_leaves_nothing(bad_files, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "modelforge", "eval", f"ckpt_path={bad_files['crafted']}"],
                            cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: ckpt_path: {bad_files['crafted']} ")
    assert _left(tmp_path) == []  # not even outputs/eval/DATE/TIME/.hydra


@pytest.mark.parametrize(("command", "file", "message"), [
    ("eval", "crafted", "error: ckpt_path: {path} is truncated or damaged: a zip archive without its end"),
    ("eval", "exported", "error: ckpt_path: {path} is a torch.export program, not a checkpoint"),
    ("train", "crafted", "error: ckpt_path: {path} is truncated or damaged: a zip archive without its end"),
    ("train", "exported", "error: ckpt_path: {path} is a torch.export program, not a checkpoint"),
])
def test_a_checkpoint_that_cannot_be_read_is_refused_before_the_run_directory(run_main, bad_files, tiny_mnist: Path,
                                                                              tmp_path: Path, command: str, file: str,
                                                                              message: str) -> None:
    result = run_main(command, f"ckpt_path={bad_files[file]}", *tiny_cli_args(tiny_mnist), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(message.format(path=bad_files[file])) and result.stderr.count("\n") == 1
    assert _left(tmp_path) == []


def test_a_checkpoint_that_does_not_fit_the_config_is_refused_before_the_run_directory(run_main, small_run: Path,
                                                                                       tiny_mnist: Path,
                                                                                       tmp_path: Path) -> None:
    other = run_main("train", "model=mlp", f"ckpt_path={small_run}", *tiny_cli_args(tiny_mnist), cwd=tmp_path)
    assert other.returncode == 2
    assert other.stderr.startswith(f"error: ckpt_path: the checkpoint holds a different model than this config builds")
    done = run_main("train", "model=cnn", "enc_sizes=[4]", "dec_sizes=[8]", "trainer.max_epochs=1",
                    f"ckpt_path={small_run}", *tiny_cli_args(tiny_mnist), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: trainer.max_epochs: the checkpoint has trained 1 epochs, so "
                                  "trainer.max_epochs=1 leaves nothing to train")
    assert _left(tmp_path) == []


def test_eval_on_data_its_model_cannot_take_is_refused_before_the_run_directory(run_main, small_run: Path,
                                                                                tmp_path: Path) -> None:
    other = tmp_path / "other"
    write_idx_set(other)  # 20x20 images of 5 classes
    result = run_main("eval", f"ckpt_path={small_run}", "data=idx", f"data.data_dir={other}", "data.val_size=8",
                      cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: data: data 'idx' has images of shape [1, 20, 20], but the checkpoint's "
                                    "model takes [1, 28, 28]\n  hint: test it on images like those it was trained on:")
    assert [p for p in _left(tmp_path) if not p.startswith("other")] == []


def test_a_run_directory_as_ckpt_path_resumes_or_evaluates_its_last_checkpoint(run_main, small_run: Path,
                                                                               tiny_mnist: Path,
                                                                               tmp_path: Path) -> None:
    resumed = run_main("train", "model=cnn", "enc_sizes=[4]", "dec_sizes=[8]", "trainer.max_epochs=2",
                       f"ckpt_path={small_run}", *tiny_cli_args(tiny_mnist), f"hydra.run.dir={tmp_path / 'r'}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (tmp_path / "r" / "checkpoints" / "last.ckpt").is_file()
    evaluated = run_main("eval", f"ckpt_path={small_run}", f"data.data_dir={tiny_mnist}",
                         f"hydra.run.dir={tmp_path / 'e'}")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert (tmp_path / "e" / "eval_metrics.json").is_file()
