"""claimed(): one holder of an output file at a time (flock), the holder named to the other, the lock free again
when its holder is gone; remove_dead_temps(): a killed writer's temp file goes, a live one's stays; committing():
a signal during a rename is reported after what the writer noted of it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from modelforge.deploy.signals import stopped_by_signals
from modelforge.errors import Terminated
from modelforge.files.atomic import remove_dead_temps, write_bytes
from modelforge.files.claim import FileBusyError, claimed


def test_a_second_claim_is_refused_naming_the_holder_and_the_lock_goes_with_the_first(tmp_path: Path) -> None:
    target = tmp_path / "out" / "m.pt2"
    with claimed(target, "export"):
        assert (tmp_path / "out" / ".m.pt2.lock").is_file()
        with pytest.raises(FileBusyError, match=rf"^output: {target} is being written by another process \(export "
                                                r"pid \d+ on .+ since \d\d:\d\d:\d\d\); wait for it to finish, or "
                                                r"write another file \(output=OTHER\.pt2\)$") as busy:
            with claimed(target, "export"):
                pass
        assert busy.value.exit_code == 1
        target.write_bytes(b"written")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["m.pt2"]
    with claimed(target):  # free again
        pass


def test_a_claim_for_a_file_never_written_leaves_no_folder_it_made(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with claimed(tmp_path / "deploy" / "sub" / "m.pt2"):
            raise RuntimeError("the export failed")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_a_lock_whose_holder_was_killed_is_free(tmp_path: Path) -> None:
    target = tmp_path / "m.pt2"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom modelforge.files.claim import claimed\n"
                               f"with claimed({str(target)!r}):\n    print('held', flush=True)\n    time.sleep(60)\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(FileBusyError, match=f"export pid {holder.pid} on "):
            with claimed(target):
                pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        holder.kill()
    assert (tmp_path / ".m.pt2.lock").exists()  # left by the killed holder, and free
    with claimed(target):
        pass


def test_a_holder_that_never_names_itself_is_still_refused_and_said_to_be_unnamed(tmp_path: Path) -> None:
    target = tmp_path / "m.pt2"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               f"lock = open({str(tmp_path / '.m.pt2.lock')!r}, 'w')\n"
                               "fcntl.flock(lock, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(FileBusyError, match=r"by another process \(a process that has not said which\); wait"):
            with claimed(target):
                pass
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_temp_files_of_dead_writers_are_removed_and_others_kept(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    names = [f".m.pt2.{dead_pid}.abcd1234.tmp", f".m.onnx.{dead_pid}.x_y9.tmp.onnx",  # a dead writer's
             f".m.pt2.{__import__('os').getpid()}.live1234.tmp", ".m.pt2.nopid123.tmp", "m.pt2"]  # kept
    for name in names:
        (tmp_path / name).write_bytes(b"")
    removed = remove_dead_temps(tmp_path)
    assert sorted(p.name for p in removed) == sorted(names[:2])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])


def test_a_sigterm_during_a_rename_is_reported_after_the_writer_noted_it(tmp_path: Path) -> None:
    target = tmp_path / "m.pt2"

    with pytest.raises(Terminated) as stopped:
        with stopped_by_signals("while loading") as now:
            now.what = "while writing m.pt2; it was not written"

            def renamed() -> None:
                signal.raise_signal(signal.SIGTERM)  # lands between the rename and the note
                now.what = "just after writing m.pt2"

            write_bytes(target, b"new", renamed)
            raise AssertionError("the SIGTERM was lost")
    assert str(stopped.value) == "stopped by SIGTERM just after writing m.pt2"
    assert target.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]
