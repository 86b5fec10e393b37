"""A run directory that already holds a run is never trained into: its files would be overwritten.

Lightning-free, so the CLI can check ``hydra.run.dir`` before Hydra (and Lightning's
logging setup) starts.
"""

from __future__ import annotations

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
