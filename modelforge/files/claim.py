"""One writer at a time for one output file: a lock file beside it, held with ``flock`` while the file is made.

Two exports into one file, started together, would each write and check it, and the file would hold whichever
renamed last while both said "check passed". The first to ``flock`` the lock file ``.NAME.lock`` holds it until
it is done; the other is refused at once, told which process holds it. ``flock`` is released by the kernel
when the holder dies, SIGKILL included, so a lock left behind by a killed process is free to take, with no
stale-lock guessing. The holder removes the lock file when it is done; a claimant that opened it just before
checks that the file it locked is still the one at that name, else tries again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from modelforge.errors import ModelforgeError


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
    lock = lock_path(path)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise FileBusyError(f"{key}: {path} is being written by another process ({holder}); wait for it to "
                                f"finish, or write another file (output=OTHER{path.suffix})") from None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed it as we opened it: claim the one at that name now
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{what} pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}\n"
                 .encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # while still held: a claimant that opened it sees it is gone
        os.close(fd)
        for folder in made:  # made for a file that was not written: nothing is left behind
            with contextlib.suppress(OSError):
                folder.rmdir()


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        if text:
            return text
    return "a process that has not said which"
