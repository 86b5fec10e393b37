"""Why a path cannot be written, in words, before any work: the one check behind every output path a config
names (a run or sweep directory, a study file, a picture), so that each refusal is one line naming what is in
the way (a parent that is a file, a folder that is not writable) instead of an OSError from deep inside a write.
And why a path named as input is no file to read (a dangling symlink, a FIFO), told before it is opened.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from modelforge.errors import ConfigError


def why_unwritable(path: str | Path, *, folder: bool) -> str | None:
    """What keeps ``path`` from being made or written; None when nothing does.

    ``folder``: ``path`` is a folder to create (or reuse); otherwise a file to create or replace. Folders that
    do not exist yet count as creatable where their nearest existing parent is a writable folder.
    """
    path = Path(path).expanduser().absolute()
    if path.exists():
        if folder != path.is_dir():
            return f"{path} is a {'file' if folder else 'folder'}, not a {'folder' if folder else 'file'}"
        target = path if folder else path.parent
        return None if os.access(target, os.W_OK | os.X_OK) else f"{target} is not writable"
    existing = next(parent for parent in path.parents if parent.exists())  # "/" at worst
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    return None if os.access(existing, os.W_OK | os.X_OK) else f"{existing} is not writable"


def check_writable(path: str | Path, key: str, *, folder: bool) -> None:
    """Raise a one-line ConfigError at config ``key`` when ``path`` cannot be written (see :func:`why_unwritable`)."""
    if (why := why_unwritable(path, folder=folder)) is not None:
        raise ConfigError(key, f"cannot write {path}: {why}")


def why_not_readable_file(path: str | Path, what: str = "a regular file") -> str | None:
    """What keeps ``path`` from being read as a file, found without opening it (opening a FIFO blocks until a
    writer comes): a symlink to nothing, a symlink loop, a FIFO, a socket, a device, a folder. None for a
    regular file (or a symlink to one). ``what``: the file it was meant to be, for the message."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if path.is_symlink():
            return f"is a symlink to {os.readlink(path)}, which does not exist"
        return "does not exist"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop (it leads back to itself)"
        return f"cannot be looked at ({exc.strerror or exc})"
    for test, kind in ((stat.S_ISREG, None), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return None if kind is None else f"is {kind}, not {what}"
    return f"is not {what}"
