"""An output path that cannot be written (a parent that is a file, a read-only folder) is refused before any work,
in one line naming what is in the way: the run and sweep directories, an Optuna study's file, summary's picture."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from modelforge.files.paths import why_unwritable


def test_why_unwritable_names_the_parent_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "FILE").write_text("a file")
    in_the_way = f"{tmp_path / 'FILE'} is a file, not a folder"
    for folder in (True, False):
        assert why_unwritable(tmp_path / "FILE" / "deeper" / "x", folder=folder) == in_the_way
    assert why_unwritable(tmp_path / "FILE", folder=True) == f"{tmp_path / 'FILE'} is a file, not a folder"
    assert why_unwritable(tmp_path, folder=False) == f"{tmp_path} is a folder, not a file"
    assert why_unwritable(tmp_path / "new" / "sub", folder=True) is None  # creatable
    assert why_unwritable(tmp_path / "FILE", folder=False) is None  # replaceable


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder without write permission")
def test_why_unwritable_names_a_read_only_folder(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    assert why_unwritable(locked / "run", folder=True) == f"{locked} is not writable"


def test_a_read_only_mount_is_not_writable(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "ro"
    mount.mkdir()
    if os.system(f"mount -t tmpfs -o size=1m,ro tmpfs {mount} 2>/dev/null") != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        assert why_unwritable(mount / "run", folder=True) == f"{mount} is not writable"
    finally:
        os.system(f"umount {mount}")


@pytest.mark.parametrize(("args", "key", "path"), [
    (["train", "-m", "model=mlp", "hydra.sweep.dir=FILE/sw"], "hydra.sweep.dir", "FILE/sw"),
    (["summary", "model=mlp", "summary.graph=FILE/g.svg"], "summary.graph", "FILE/g.svg"),
    (["train", "-m", "hparams_search=optuna", "hydra.sweep.dir=sw", "hydra.sweeper.storage=journal:FILE/j.log"],
     "hydra.sweeper.storage", "FILE/j.log"),
])
def test_a_path_under_a_file_is_one_line_with_exit_2(run_main, tmp_path: Path, args: list[str], key: str,
                                                     path: str) -> None:
    (tmp_path / "FILE").write_text("a file")
    result = run_main(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: {key}: cannot write {path}: {tmp_path / 'FILE'} is a file, not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]  # nothing made, not even outputs/

