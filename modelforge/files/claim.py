"""One writer at a time for one output file: a lock file beside it, held with ``filelock`` while the file is made.

Two exports into one file, started together, would each write and check it, and the file would hold whichever
renamed last while both said "check passed". The first to lock ``.NAME.lock`` (``flock``, through ``filelock``)
holds it until it is done; the other is refused at once, told which process holds it. ``flock`` is released by
the kernel when the holder dies, SIGKILL included, so a lock left behind by a killed process is free to take, with
no stale-lock guessing. The holder removes the lock file while it still holds it; ``filelock`` does not count a
lock on a removed file as held, so a claimant that opened it just before tries again.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from modelforge.errors import ModelforgeError


_TRIES = 100  # a holder names itself within microseconds of taking the lock: 1 s at most before saying it did not


class FileBusyError(ModelforgeError):
    """Another process is writing the file (exit 1: nothing was wrong with the command)."""

    exit_code = 1


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def claimed(path: str | Path, what: str = "export", key: str = "output") -> Iterator[None]:
    """Hold ``path`` for this process while the block runs, or raise FileBusyError naming the holder.

    ``what``: the command, written into the lock file for the message another claimant gets.
    """
    path = Path(path)
    made = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path(path), timeout=0, on_acquired=lambda fd: _say_who(fd, what))
    for _ in range(_TRIES):
        try:
            lock.acquire()
            break
        except Timeout:
            if (holder := _holder(lock_path(path))) is not None:
                raise _busy(path, key, holder) from None
            # its holder is between locking the file and writing its name in it, or removed it as we locked it
            time.sleep(0.01)
    else:
        raise _busy(path, key, "a process that has not said which")
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock.lock_file)  # while still held: a claimant that locked it sees it is gone
        lock.release()
        for folder in made:  # made for a file that was not written: nothing is left behind
            with contextlib.suppress(OSError):
                folder.rmdir()


def _say_who(fd: int, what: str) -> None:
    os.ftruncate(fd, 0)
    os.write(fd, f"{what} pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}\n".encode())


def _busy(path: Path, key: str, holder: str) -> FileBusyError:
    return FileBusyError(f"{key}: {path} is being written by another process ({holder}); wait for it to finish, or "
                         f"write another file (output=OTHER{path.suffix})")


def _holder(lock: Path) -> str | None:
    """Who holds ``lock``, as its holder wrote it; None when it is gone or says nothing yet."""
    try:
        return lock.read_text("utf-8", "replace").strip() or None
    except OSError:
        return None
