"""Where ``export`` and ``predict`` write, checked before any work: a path they cannot write is one message
then, not a failure after the model has run. Folders missing on the way are made when the file is written."""

from __future__ import annotations

import os
from pathlib import Path

from modelforge.errors import ConfigError


def check_output_place(path: Path, key: str = "output") -> None:
    """Raise a ConfigError naming ``key`` when ``path`` cannot be written: a folder stands there, a file stands
    where one of its folders should be, or the nearest folder that exists is not writable."""
    if path.is_dir():
        raise ConfigError(key, f"cannot write {path}: a folder of that name is there")
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir():
        raise ConfigError(key, f"cannot write {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(key, f"cannot write {path}: {existing} is not writable")


def names_a_folder(output: str | Path) -> bool:
    """``output`` names a folder: one that exists, or any path written with a trailing slash (``deploy/``)."""
    return Path(output).expanduser().is_dir() or str(output).endswith(("/", "\\"))
