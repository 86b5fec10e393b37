"""Crash-safe writes: a temp file in the target's own directory, fsynced, then renamed.

``os.replace`` within one directory is atomic on POSIX, so a reader (or a resume) sees the
old file or the new one, never half of one; a SIGKILL mid-write leaves the old file and a
``.NAME.*.tmp`` beside it. A failed write removes its temp file. A full disk is reported as
one :class:`DiskFullError` naming the directory and the space the write needed.
Lightning-free, so the sweep summary and the CLI can use it.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from modelforge.errors import ModelforgeError


class DiskFullError(ModelforgeError, OSError):
    """No space left for a file of the run; the earlier files are kept."""

    exit_code = 1

    def __init__(self, path: Path, needed: int | None, free: int | None = None) -> None:
        folder = path.parent
        need = f"about {_size(needed)}" if needed else "more space"
        have = f", {_size(free)} free" if free is not None else ""
        super().__init__(errno.ENOSPC, f"no space left in {folder} to write {path.name}: it needs {need}{have}; "
                         "the files written before are kept")
        self.path, self.needed = path, needed

    def __str__(self) -> str:
        return str(self.strerror)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def write_with(path: str | Path, write: Callable[[IO[bytes]], None], needed: int | None = None, *,
               durable: bool = True) -> None:
    """Call ``write(handle)`` on a temp file beside ``path``, fsync it, then rename it to ``path``.

    ``needed`` (bytes, when known in advance) is what a full-disk message reports; otherwise
    the bytes written before the disk filled up are. ``durable=False`` skips the fsyncs: still
    all or nothing for readers and for a killed writer, but a power cut may leave a damaged file
    (for caches, whose readers check what they read).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; the file gets what open() would give it
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        full = _is_disk_full(exc)
        written = os.path.getsize(tmp) if full and os.path.exists(tmp) else None
        free = _free(path.parent) if full else None  # measured before the temp file goes
        _remove(tmp)
        if full:
            raise DiskFullError(path, needed or written, free) from None
        raise
    if durable:
        _fsync_dir(path.parent)


def write_bytes(path: str | Path, data: bytes, *, durable: bool = True) -> None:
    """Atomically replace ``path`` with ``data`` (``durable``: as in :func:`write_with`)."""
    write_with(path, lambda handle: handle.write(data), needed=len(data), durable=durable)


def write_text(path: str | Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8)."""
    write_bytes(path, text.encode("utf-8"))


def _is_disk_full(exc: BaseException) -> bool:
    # torch.save reports a full disk as a RuntimeError from its zip writer, with the errno lost.
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("No space left" in text or "file write failed" in text
                                              or "unexpected pos" in text)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _free(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every filesystem allows opening a directory.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
