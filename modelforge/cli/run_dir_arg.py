"""A ``hydra.run.dir=`` given on the command line that already holds a run is refused up front.

``train`` refuses such a directory itself, but only once Hydra has started the job,
and by then Hydra has rewritten the earlier run's ``.hydra/`` files.
"""

from __future__ import annotations

from pathlib import Path

from modelforge.run_dir import check_run_dir_is_new

MULTIRUN_FLAGS = ("-m", "--multirun")


def check_run_dir_arg(argv: list[str]) -> None:
    """Raise ConfigError when ``argv`` names, with ``hydra.run.dir=``, a directory holding a run."""
    if any(arg in MULTIRUN_FLAGS for arg in argv):
        return  # jobs of a sweep go to hydra.sweep.dir
    values = [arg.split("=", 1)[1] for arg in argv if arg.startswith("hydra.run.dir=")]
    if not values or "${" in values[-1]:
        return  # Hydra's default is new for every launch
    check_run_dir_is_new(Path(values[-1].strip("'\"")))  # Lightning's DDP children quote it
