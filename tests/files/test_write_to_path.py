"""write_to_path: for writers that take only a path (the ONNX exporter): a temp file beside the target with its
suffix, renamed when whole; a failure, a full disk or Ctrl-C leaves the earlier file and no temp file."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from modelforge.files.atomic import DiskFullError, write_to_path


def test_the_writer_gets_a_temp_path_beside_the_target_with_its_suffix(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    seen: list[Path] = []

    def save(temp: Path) -> None:
        seen.append(temp)
        temp.write_bytes(b"onnx bytes")

    write_to_path(target, save)
    assert seen[0].parent == tmp_path and seen[0].suffix == ".onnx" and seen[0].name.startswith(".model.onnx.")
    assert target.read_bytes() == b"onnx bytes" and sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # as open() would make it, not mkstemp's 0600


@pytest.mark.parametrize("failure", ["disk full", "Ctrl-C", "a bug"])
def test_a_failed_save_keeps_the_earlier_file_and_leaves_no_temp_file(failure: str, tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    target.write_bytes(b"earlier")
    raised = {"disk full": OSError(errno.ENOSPC, "No space left on device"), "Ctrl-C": KeyboardInterrupt(),
              "a bug": ValueError("boom")}[failure]

    def save(temp: Path) -> None:
        temp.write_bytes(b"half a model")
        raise raised

    expected = {"disk full": DiskFullError, "Ctrl-C": KeyboardInterrupt, "a bug": ValueError}[failure]
    with pytest.raises(expected) as caught:
        write_to_path(target, save, needed=3_000_000)
    if failure == "disk full":
        assert str(caught.value).startswith(f"no space left in {tmp_path} to write model.onnx: it needs about 2.9 MB, ")
    assert target.read_bytes() == b"earlier" and sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
