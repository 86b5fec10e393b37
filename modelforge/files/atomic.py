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
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NoReturn

import yaml

from modelforge.errors import ModelforgeError, RunStopped


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


def _size(n: int) -> str:
    unit = min(int(math.log(n, 1024)), 4) if n >= 1024 else 0
    return f"{n / 1024 ** unit:.1f} {' KMGT'[unit]}B" if unit else f"{n} bytes"


def write_with(path: str | Path, write: Callable[[IO[bytes]], None], needed: int | None = None) -> None:
    """Call ``write(handle)`` on a temp file beside ``path``, fsync it, then rename it to ``path``.

    ``needed``: the bytes a full-disk message reports (else those written before it filled up).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; the file gets what open() would give it
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        _failed(exc, path, tmp, needed)
    _fsync_dir(path.parent)


def write_to_path(path: str | Path, save: Callable[[Path], None], needed: int | None = None) -> None:
    """Call ``save(temp)`` for a writer that takes only a path (the ONNX exporter), then fsync ``temp`` and rename
    it to ``path``; a failure, Ctrl-C or stop leaves no temp file and raises as :func:`write_with` does.

    The temp file is beside ``path`` with its suffix (writers pick the format by it). A signal reaches the
    write only as an exception its handler raises: SIGTERM's default ends the process, temp file and all.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        os.close(fd)
        save(Path(tmp))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        _failed(exc, path, tmp, needed)
    _fsync_dir(path.parent)


def _failed(exc: BaseException, path: Path, tmp: str, needed: int | None) -> NoReturn:
    """Remove ``tmp`` and raise what stopped the write: the stop behind it, a DiskFullError, or ``exc``."""
    full = _is_disk_full(exc)
    written = os.path.getsize(tmp) if full and os.path.exists(tmp) else None
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    free = _free(path.parent) if full else None  # once the temp file is gone: what the user has to add to
    # Ctrl-C (or a stop) inside torch.save comes out as its zip writer's RuntimeError, with it as the context.
    if (stop := _stop_in(exc)) is not None and stop is not exc:
        raise stop from None
    if full:
        raise DiskFullError(path, needed or written, free) from None
    raise exc


def write_text(path: str | Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | Path, data: bytes | memoryview) -> None:
    """Atomically replace ``path`` with ``data``; a full disk says how much it needed."""
    write_with(path, lambda handle: handle.write(data), needed=len(data))


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


def _free(folder: Path) -> int | None:
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


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Strict JSON (non-finite numbers as null), written atomically."""
    write_text(path, json.dumps(finite_or_none(data), indent=2, sort_keys=True, allow_nan=False) + "\n")


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    write_text(path, yaml.safe_dump(data, sort_keys=False))
