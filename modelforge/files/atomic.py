"""Crash-safe writes: a temp file beside the target, fsynced, then renamed.

``os.replace`` within one directory is atomic on POSIX: a reader (or a resume) sees the old
file or the new one, never half of one. The lowest layer of the package (torch-, Hydra- and
Lightning-free): training records, checkpoints, exports, predictions and sweep summaries all
write through it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import yaml

from modelforge.errors import ModelforgeError, RunStopped


class DiskFullError(ModelforgeError, OSError):
    """No space left for a file of the run; the earlier files are kept."""

    exit_code = 1

    def __init__(self, path: Path, needed: int | None, free: int | None = None) -> None:
        folder = path.parent
        # figures that round alike ("1.7 MB, 1.7 MB free") read as if it fitted: then in bytes, which decided it
        size = _size if None in (needed, free) or _size(needed) != _size(free) else (lambda n: f"{n:,} bytes")
        need = f"about {size(needed)}" if needed else "more space"
        have = f", {size(free)} free" if free is not None else ""
        super().__init__(errno.ENOSPC, f"no space left in {folder} to write {path.name}: it needs {need}{have}; "
                         "the files written before are kept")
        self.path, self.needed = path, needed

    def __str__(self) -> str:
        return str(self.strerror)


def _size(n: int) -> str:
    unit = min(int(math.log(n, 1024)), 4) if n >= 1024 else 0
    return f"{n / 1024 ** unit:.1f} {' KMGT'[unit]}B" if unit else f"{n} bytes"


def write_with(path: str | Path, write: Callable[[IO[bytes]], None], needed: int | None = None,
               committed: Callable[[], None] | None = None) -> None:
    """Call ``write(handle)`` on a temp file beside ``path``, fsync it, then rename it to ``path``.

    ``needed``: the bytes a full-disk message reports (else those written before it filled up).
    ``committed``: called just after the rename, inside the same :func:`committing` section: a stop that comes
    during the two waits for both (what the caller records there is true when the stop is reported).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; the file gets what open() would give it
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        _rename(tmp, path, committed)
    except BaseException as exc:
        _failed(exc, path, tmp, needed)
    _fsync_dir(path.parent)


def write_to_path(path: str | Path, save: Callable[[Path], None], needed: int | None = None,
                  committed: Callable[[], None] | None = None) -> None:
    """Call ``save(temp)`` for a writer that takes only a path (the ONNX exporter), then fsync ``temp`` and rename
    it to ``path``; a failure, Ctrl-C or stop leaves no temp file and raises as :func:`write_with` does.

    The temp file is beside ``path`` with its suffix (writers pick the format by it). A signal reaches the
    write only as an exception its handler raises: SIGTERM's default ends the process, temp file and all.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=f".tmp{path.suffix}")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        os.close(fd)
        save(Path(tmp))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _rename(tmp, path, committed)
    except BaseException as exc:
        _failed(exc, path, tmp, needed)
    _fsync_dir(path.parent)


# --- the rename and what the caller notes of it, as one step for a stop --------------------------------------

_stops_held = 0  # committing() sections open now (the main thread's; signal handlers run there)
_held_stop: list[BaseException] = []  # a stop that came during one, raised when the outermost ends


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """A section a stop does not interrupt: a signal handler that calls :func:`stop` during it has its stop raised
    when the section ends. Keeps "the file was renamed into place" and what the program says of it together."""
    global _stops_held
    _stops_held += 1
    try:
        yield
    finally:
        _stops_held -= 1
        if not _stops_held and _held_stop:
            raise _held_stop.pop()


def stop(exc: BaseException) -> None:
    """Raise ``exc`` (a signal handler's stop) now, or at the end of the :func:`committing` section under way."""
    if _stops_held:
        _held_stop[:] = [exc]
        return
    raise exc


def _rename(tmp: str, path: Path, committed: Callable[[], None] | None) -> None:
    with committing():
        os.replace(tmp, path)
        if committed is not None:
            committed()


# --- temp files: named by their writer's pid, so that a killed writer's are known for what they are -----------

TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[^./]+\.tmp(\.\w+)?")


def _temp_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}."


def remove_dead_temps(folder: str | Path) -> list[Path]:
    """Remove the temp files in ``folder`` whose writer is gone (a SIGKILL leaves its temp file: no handler runs);
    return them. A temp file of a live process, or one not named by these writers, is left alone."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            found = TEMP_NAME.fullmatch(entry.name)
            if found and entry.is_file(follow_symlinks=False) and not _alive(int(found["pid"])):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or no pid at all): not ours to judge
    return True


def _failed(exc: BaseException, path: Path, tmp: str, needed: int | None) -> NoReturn:
    """Remove ``tmp`` and raise what stopped the write: the stop behind it, a DiskFullError, or ``exc``."""
    full = _is_disk_full(exc)
    written = os.path.getsize(tmp) if full and os.path.exists(tmp) else None
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    free = free_space(path.parent) if full else None  # once the temp file is gone: what the user has to add to
    # Ctrl-C (or a stop) inside torch.save comes out as its zip writer's RuntimeError, with it as the context.
    if (stop := _stop_in(exc)) is not None and stop is not exc:
        raise stop from None
    if full:
        raise DiskFullError(path, needed or written, free) from None
    raise exc


def write_text(path: str | Path, text: str, committed: Callable[[], None] | None = None) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8)."""
    write_bytes(path, text.encode("utf-8"), committed)


def write_bytes(path: str | Path, data: bytes | memoryview, committed: Callable[[], None] | None = None) -> None:
    """Atomically replace ``path`` with ``data``; a full disk says how much it needed (``committed``: as in
    :func:`write_with`)."""
    write_with(path, lambda handle: handle.write(data), needed=len(data), committed=committed)


def _is_disk_full(exc: BaseException) -> bool:
    # torch.save reports a full disk as a RuntimeError from its zip writer, with the errno lost.
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("No space left" in text or "file write failed" in text
                                              or "unexpected pos" in text)


def _stop_in(exc: BaseException) -> BaseException | None:
    """The Ctrl-C, exit or run stop among ``exc`` and the exceptions it was raised while handling."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, (KeyboardInterrupt, SystemExit, RunStopped)):
        seen = seen.__context__
    return seen


_UMASK = os.umask(0)
os.umask(_UMASK)


def free_space(folder: Path) -> int | None:
    """The bytes free in ``folder``'s file system, for a full disk's message; None when it cannot be read."""
    with contextlib.suppress(OSError):
        return shutil.disk_usage(folder).free
    return None


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every filesystem allows opening a directory.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def finite_or_none(value: Any) -> Any:
    """``value`` with every NaN/inf float replaced by None, recursively (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def write_json(path: Path, data: dict[str, Any], committed: Callable[[], None] | None = None) -> None:
    """Strict JSON (non-finite numbers as null), written atomically."""
    write_text(path, json.dumps(finite_or_none(data), indent=2, sort_keys=True, allow_nan=False) + "\n", committed)


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    write_text(path, yaml.safe_dump(data, sort_keys=False))
