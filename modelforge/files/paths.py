"""Why a path cannot be written, in words, before any work: the one check behind every output path a config
names (a run or sweep directory, a study file, a picture), so that each refusal is one line naming what is in
the way (a parent that is a file, a folder that is not writable) instead of an OSError from deep inside a write.
"""

from __future__ import annotations

import os
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
