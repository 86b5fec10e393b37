"""Run records are never overwritten: a run claims its directory atomically, and a sweep directory is checked.

:func:`claim_run_dir` is the one place a run directory becomes a run's own: it creates
:data:`CLAIM_FILE` there with ``O_CREAT | O_EXCL``, which the filesystem grants to exactly one
process, so of two runs started together into one directory one goes on and the other is
refused before it writes anything there (checking for files and then writing would let both
through). The CLI claims in a Hydra callback's ``on_run_start``, after composing the config and
before ``run_job`` writes ``.hydra/`` and the log file there; ``train()`` claims the same way
when called from Python or as a sweep job, and takes over the claim the callback made for it.
``on_multirun_start`` checks the sweep directory before the sweeper writes ``multirun.yaml``.
No command-line parsing is involved: the composed ``hydra.run.dir`` / ``hydra.sweep.dir`` is
checked, whatever set it. Registered in ``conf/train.yaml`` and ``conf/eval.yaml`` under
``hydra.callbacks``; the sweep check is called by :class:`modelforge.sweep.callback.SweepSummary`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from modelforge.errors import ConfigError

EXIT_CONFIG_ERROR = 2
FINAL_RECORDS = ("metrics.json", "eval_metrics.json")  # written when a run ends, however it ends
RUN_FILES = (*FINAL_RECORDS, "config.yaml")
CLAIM_FILE = ".run_claim"  # who claimed the directory: pid, host, time, command
SQLITE_PREFIX = "sqlite:///"

# Directories a Hydra callback of this process claimed for the task Hydra runs next: that
# task's own claim_run_dir takes the claim over, once.
_claimed_for_task: set[str] = set()


def run_records(run_dir: Path) -> list[Path]:
    """The files in ``run_dir`` that record an earlier run (empty for a new directory)."""
    found = [run_dir / name for name in RUN_FILES if (run_dir / name).exists()]
    return found + sorted((run_dir / "checkpoints").glob("*.ckpt"))


def is_ddp_child() -> bool:
    """True in a DDP rank that Lightning launched: it re-runs the command into its rank 0's run directory."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0) > 0


def check_run_dir(run_dir: Path, command: str) -> None:
    """Raise ConfigError when ``run_dir`` holds a run (``command`` would overwrite its record) or another run claimed it."""
    if is_ddp_child():
        return
    if (run_dir / CLAIM_FILE).exists() and not any((run_dir / name).exists() for name in FINAL_RECORDS):
        raise _taken(run_dir)  # its run is under way (or was killed before it could say how it ended)
    found = run_records(run_dir)
    if not found:
        return
    if command == "train":
        hint = (f"pick a new directory, or resume with ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'} "
                "(the resumed run gets a directory of its own)")
    else:
        hint = f"leave hydra.run.dir unset: `{command}` writes into a new directory of its own"
    raise ConfigError("hydra.run.dir", f"{run_dir} already holds a run ({', '.join(p.name for p in found[:3])}); "
                      "it is left untouched", hint=hint)


def claim_run_dir(run_dir: Path, command: str = "train", *, for_task: bool = False) -> None:
    """Make ``run_dir`` this run's own, atomically, or raise ConfigError; create it if need be.

    Call it once every config check has passed and before anything is written there. A
    directory that another run claimed and has not finished (it may have started this very
    moment) is refused in one line naming it; one that holds a run, as :func:`check_run_dir` says. A DDP
    rank other than 0 writes into its rank 0's directory and claims nothing. ``for_task``: a
    Hydra callback claims for the task that Hydra runs next in this process, whose own call
    takes the claim over instead of being refused.
    """
    if is_ddp_child():
        return
    key = os.path.abspath(run_dir)
    if key in _claimed_for_task:
        _claimed_for_task.discard(key)
        return
    check_run_dir(run_dir, command)
    claim = run_dir / CLAIM_FILE
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
              "claimed_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        if not run_dir.is_dir():
            raise _unwritable(run_dir, "it is a file") from None
        raise _taken(run_dir) from None
    except OSError as exc:
        raise _unwritable(run_dir, exc.strerror or str(exc)) from None
    try:
        os.write(fd, json.dumps(holder).encode() + b"\n")  # the claim is made; this only says whose
    except OSError:
        pass  # a full disk: the run's own first write reports it
    finally:
        os.close(fd)
    if for_task:
        _claimed_for_task.add(key)


def forget_claims_for_tasks() -> None:
    """Drop claims made for a task that never ran: a later run in this process must claim anew."""
    _claimed_for_task.clear()


def _taken(run_dir: Path) -> ConfigError:
    try:
        holder = json.loads((run_dir / CLAIM_FILE).read_text())
        by = f" (pid {holder['pid']} on {holder['host']}, since {holder['claimed_at']})"
    except (OSError, ValueError, KeyError, TypeError):  # being written this very moment
        by = ""
    return ConfigError("hydra.run.dir", f"{run_dir} is taken by another run{by}; this run is refused and "
                                        "writes nothing there: pick another directory")


def _unwritable(run_dir: Path, why: str) -> ConfigError:
    return ConfigError("hydra.run.dir", f"cannot write the run directory {run_dir}: {why}",
                       hint="pick a directory you can write, e.g. hydra.run.dir=outputs/my_run")


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
    """Claims the run directory (``eval``) before Hydra writes there: refuses one that holds or is claimed by a run."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            claim_run_dir(Path(config.hydra.run.dir), str(config.hydra.job.name), for_task=True)
        except ConfigError as exc:
            refuse(exc)
