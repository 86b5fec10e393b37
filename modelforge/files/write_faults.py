"""A write that failed (a folder turned read-only or lost its write permission, a full disk) as one line that
names the file and what is in the way, instead of an OSError from inside Lightning's CSV logger or an atomic
write (whose temp file's name would mean nothing to a user)."""

from __future__ import annotations

import errno
from pathlib import Path

from modelforge.errors import ModelforgeError
from modelforge.files.atomic import TEMP_NAME, DiskFullError, free_space

_UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}
_FULL = {errno.ENOSPC, errno.EDQUOT}


class UnwritableError(ModelforgeError, OSError):
    """A file of the run could not be written: its folder is read-only or not writable; what was written before
    is kept. Exit 1: a fault of the machine, not of the input."""

    exit_code = 1

    def __init__(self, path: Path, cause: OSError, consequence: str) -> None:
        super().__init__(cause.errno, f"cannot write {path}: {why_not_written(cause)}; {consequence}")
        self.path = path

    def __str__(self) -> str:
        return str(self.strerror)


def written_path(filename: str | Path) -> Path:
    """The file a write was making: the target of an atomic write's temp file, else ``filename`` itself."""
    path = Path(filename)
    return path.with_name(match["target"]) if (match := TEMP_NAME.fullmatch(path.name)) else path


def write_fault(exc: BaseException, run_dir: Path,
                consequence: str = "the files written before are kept") -> ModelforgeError | None:
    """The write into ``run_dir`` that failed, in one line, when that is what ``exc`` stems from; else None.

    Lightning raises the CSV logger's error again while it ends the fit (``logger.finalize``), with the first one
    as its context: the oldest exception of the chain is the cause, and only a cause that is a write is translated.
    """
    cause = exc
    while (earlier := cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)) is not None:
        cause = earlier
    if isinstance(cause, (DiskFullError, UnwritableError)):
        return cause
    if not isinstance(cause, OSError) or not cause.filename or not _under(cause.filename, run_dir):
        return None
    path = written_path(cause.filename)
    if cause.errno in _FULL:
        return DiskFullError(path, None, free_space(path.parent))
    if cause.errno in _UNWRITABLE:
        return UnwritableError(path, cause, consequence)
    return None


def why_not_written(exc: OSError) -> str:
    """``Read-only file system``, ``Permission denied``: the system's words for a failed write, without its
    errno and the temp file's name."""
    return exc.strerror or str(exc)


def write_error_line(exc: OSError) -> str:
    """A failed write in one line: a full disk's message, or ``cannot write PATH: WHY`` (the file the write was
    making, not its temp file)."""
    if isinstance(exc, (DiskFullError, UnwritableError)) or not exc.filename:
        return str(exc)
    return f"cannot write {written_path(exc.filename)}: {why_not_written(exc)}"


def _under(filename: str | Path, folder: Path) -> bool:
    return Path(filename).absolute().is_relative_to(folder.absolute())
