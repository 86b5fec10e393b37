"""A run directory must hold no earlier run (its files would be overwritten) and be writable.

Lightning-free: the CLI checks ``hydra.run.dir`` in a Hydra callback, before Hydra
creates the directory and writes its ``.hydra/`` files there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from modelforge.errors import ConfigError


def check_run_dir_is_new(run_dir: Path) -> None:
    """Refuse to train into a directory that already holds a run: its files would be overwritten."""
    earlier = [p for p in (run_dir / "metrics.json", *sorted((run_dir / "checkpoints").glob("*.ckpt"))) if p.exists()]
    if earlier:
        raise ConfigError(
            "hydra.run.dir",
            f"{run_dir} already holds a run ({', '.join(p.name for p in earlier[:3])}); it is left untouched",
            hint=f"pick a new directory, or resume with ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'} "
                 "(the resumed run gets a directory of its own)",
        )


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
