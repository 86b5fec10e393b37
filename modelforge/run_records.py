"""Run records are never overwritten: a Hydra callback refuses a run or sweep directory that holds one.

Hydra calls ``on_run_start`` after composing the config and before ``run_job`` creates the
run directory and writes ``.hydra/`` and the log file there, and ``on_multirun_start`` before
the sweeper writes ``multirun.yaml``: a refusal at that point leaves the directory byte for
byte as it was. No command-line parsing is involved: the composed ``hydra.run.dir`` /
``hydra.sweep.dir`` is checked, whatever set it. Registered in ``conf/train.yaml`` and
``conf/eval.yaml`` under ``hydra.callbacks``; the sweep check is called by
:class:`modelforge.sweep.callback.SweepSummary`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from modelforge.errors import ConfigError

EXIT_CONFIG_ERROR = 2
RUN_FILES = ("metrics.json", "eval_metrics.json", "config.yaml")
SQLITE_PREFIX = "sqlite:///"


def run_records(run_dir: Path) -> list[Path]:
    """The files in ``run_dir`` that record an earlier run (empty for a new directory)."""
    found = [run_dir / name for name in RUN_FILES if (run_dir / name).exists()]
    return found + sorted((run_dir / "checkpoints").glob("*.ckpt"))


def is_ddp_child() -> bool:
    """True in a DDP rank that Lightning launched: it re-runs the command into its rank 0's run directory."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0) > 0


def check_run_dir(run_dir: Path, command: str) -> None:
    """Raise ConfigError when ``run_dir`` holds a run: ``command`` would overwrite its record."""
    found = [] if is_ddp_child() else run_records(run_dir)
    if not found:
        return
    if command == "train":
        hint = (f"pick a new directory, or resume with ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'} "
                "(the resumed run gets a directory of its own)")
    else:
        hint = f"leave hydra.run.dir unset: `{command}` writes into a new directory of its own"
    raise ConfigError("hydra.run.dir", f"{run_dir} already holds a run ({', '.join(p.name for p in found[:3])}); "
                      "it is left untouched", hint=hint)


def prepare_run_dir(run_dir: Path, command: str = "train") -> None:
    """Create ``run_dir`` (a new one, or one without a run) and make sure files can be written in it.

    Called once every config check has passed, right before the run starts writing there.
    """
    check_run_dir(run_dir, command)
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


def check_sweep_dir(config: DictConfig) -> None:
    """Raise ConfigError when ``hydra.sweep.dir`` holds a sweep that this one is not continuing.

    Continuing is what the Optuna sweeper does with a study stored in that directory: its
    new jobs get new directories (``<num>_<launch id>``), so no finished job's record changes.
    """
    sweep_dir = Path(config.hydra.sweep.dir)
    if not sweep_dir.is_dir():
        return
    earlier = [p for p in (sweep_dir / "multirun.yaml", sweep_dir / "summary.csv") if p.exists()]
    earlier += sorted(p.parent for p in sweep_dir.glob("*/metrics.json"))
    if not earlier or _continues_a_study(config, sweep_dir):
        return
    raise ConfigError("hydra.sweep.dir", f"{sweep_dir} already holds a sweep ({', '.join(p.name for p in earlier[:4])}"
                      f"{', ...' if len(earlier) > 4 else ''}); it is left untouched",
                      hint="pick a new hydra.sweep.dir (or leave it unset); an Optuna search "
                           "(hparams_search=optuna) continues the study stored in its directory")


def _continues_a_study(config: DictConfig, sweep_dir: Path) -> bool:
    storage = str(config.hydra.sweeper.get("storage") or "")
    if not storage.startswith(SQLITE_PREFIX):
        return False
    db = Path(storage[len(SQLITE_PREFIX):])
    return db.is_file() and db.resolve().parent == sweep_dir.resolve()


def refuse(exc: ConfigError) -> None:
    """Print the error as the CLI does and exit 2 (a SystemExit passes Hydra's error printing)."""
    print(f"error: {exc}", file=sys.stderr)
    raise SystemExit(EXIT_CONFIG_ERROR)


class KeepRunRecords(Callback):
    """Refuses to start a run (``train``/``eval``) in a directory that holds one."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if is_ddp_child():
            return
        try:
            check_run_dir(Path(config.hydra.run.dir), str(config.hydra.job.name))
        except ConfigError as exc:
            refuse(exc)
