"""A run directory must hold no earlier run (its files would be overwritten) and be writable.

Lightning-free: the CLI checks ``hydra.run.dir`` in a Hydra callback, before Hydra
creates the directory and writes its ``.hydra/`` files there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from modelforge.errors import ConfigError
from modelforge.run_records import check_run_dir


def check_run_dir_is_new(run_dir: Path) -> None:
    """Refuse to train into a directory that already holds a run: its files would be overwritten."""
    check_run_dir(run_dir, "train")


def prepare_run_dir(run_dir: Path) -> None:
    """Create ``run_dir`` (a new one, or one without a run) and make sure files can be written in it.

    Called once every config check has passed, right before the run starts writing there.
    """
    check_run_dir_is_new(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as exc:
        raise ConfigError(
            "hydra.run.dir",
            f"cannot write the run directory {run_dir}: {exc.strerror or exc}",
            hint="pick a directory you can write, e.g. hydra.run.dir=outputs/my_run",
        ) from None
