"""Run records: the run directory's claim, its metrics.json, and the CLI's refusals.

Lightning-free, so the sweep summary and CLI use it; the writes themselves go through
:mod:`modelforge.files.atomic`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any, NoReturn

from modelforge.errors import ConfigError, ModelforgeError
from modelforge.files.atomic import write_json
from modelforge.files.paths import why_unwritable
from modelforge.files.write_faults import write_error_line, write_fault
from modelforge.train import launch

EXIT_CONFIG_ERROR = 2
FINAL_RECORDS = ("metrics.json", "eval_metrics.json")  # written when a run ends, however it ends
RUN_FILES = (*FINAL_RECORDS, "config.yaml")
CLAIM_FILE = ".run_claim"  # who claimed the directory: pid, host, time, command
SETUP_LEFTOVERS = {CLAIM_FILE, "metrics.json", ".hydra", "train.log"}  # all that a run failed at setup leaves


def check_run_dir(run_dir: Path, command: str, dir_key: str = "run_dir") -> None:
    """Raise ConfigError when ``run_dir`` holds a run (``command`` would overwrite its record) or another run claimed it;
    ``dir_key``: where the run directory was given (``hydra.run.dir`` on the command line), as the error names it."""
    if (run_dir / CLAIM_FILE).exists() and not any((run_dir / name).exists() for name in FINAL_RECORDS):
        raise _taken(run_dir, dir_key)  # its run is under way (or was killed before it could say how it ended)
    found = [run_dir / name for name in RUN_FILES if (run_dir / name).exists()]
    found += sorted((run_dir / "checkpoints").glob("*.ckpt"))
    if not found:
        return
    if command == "train":
        resume = _resume_point(run_dir)
        hint = (f"pick a new directory, or resume with {resume} (the resumed run gets a directory of its own)"
                if resume else "pick a new directory (it holds no last.ckpt to resume from)")
    else:
        hint = f"leave {dir_key} unset: `{command}` writes into a new directory of its own"
    # One line, as for a directory taken by a run under way: two runs racing for it see one or the other.
    raise ConfigError(dir_key, f"{run_dir} already holds a run ({', '.join(p.name for p in found[:3])}); "
                      f"it is left untouched: {hint}")


def _resume_point(run_dir: Path) -> str | None:
    """``ckpt_path=...`` that resumes the run in ``run_dir``: its record's ``resume_with``, else its last.ckpt."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if resume := json.loads((run_dir / "metrics.json").read_text()).get("resume_with"):
            return str(resume)
    last = run_dir / "checkpoints" / "last.ckpt"
    return f"ckpt_path={last}" if last.is_file() else None


def _failed_at_setup(run_dir: Path) -> str | None:
    """The error of a run that failed before training in ``run_dir`` (``stage: setup``: missing data, a bad
    checkpoint) when that is all the directory holds (Hydra's ``.hydra/`` and log, the claim, the record); else None."""
    try:
        record = json.loads((run_dir / "metrics.json").read_text())
        leftovers = {p.name for p in run_dir.iterdir()}
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("stage") != "setup" or leftovers - SETUP_LEFTOVERS:
        return None
    return str(record.get("error") or "no error recorded").splitlines()[0]


def _take_over(run_dir: Path) -> bool:
    """Take ``run_dir`` over from a run that failed at setup. Its record is renamed aside first, which one process
    wins: another that races for the directory then finds the old claim without a record (taken) or the new claim."""
    aside = run_dir / f".setup_failure.{os.getpid()}.json"
    try:
        os.rename(run_dir / "metrics.json", aside)
    except OSError:  # another run took it first
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(run_dir / CLAIM_FILE)
    os.unlink(aside)
    return True


def claim_run_dir(run_dir: Path, command: str = "train", *, dir_key: str = "run_dir") -> None:
    """Make ``run_dir`` this run's own, atomically (O_EXCL claim file), or raise ConfigError.

    Call it after every config check and before anything is written there. ``dir_key``: as
    :func:`check_run_dir`'s. Of ranks that torchrun or srun started together, rank 0 claims and the others take its verdict.
    """
    if launch.global_rank() > 0 and not launch.started_together():
        return  # Lightning started this rank after its rank 0 had claimed; it writes no records there
    key = os.path.abspath(run_dir)
    claimed = launch.rank_zero_decides("run_dir_claim", lambda: _claim(run_dir, command, key, dir_key))
    if claimed != key:
        raise ConfigError(dir_key, f"rank 0 claimed {claimed}, but rank {launch.global_rank()} was given {key}",
                          hint="give every rank the same hydra.run.dir (or none: rank 0 picks one for all)")


def _claim(run_dir: Path, command: str, key: str, dir_key: str) -> str:
    # A directory whose run failed before training holds nothing to keep: the same command, its data fixed, runs there.
    if command == "train" and (error := _failed_at_setup(run_dir)) is not None and _take_over(run_dir):
        print(f"note: {run_dir} held only the record of a run that failed before training ({error}); this run "
              "takes the directory over", file=sys.stderr)
    check_run_dir(run_dir, command, dir_key)
    claim = run_dir / CLAIM_FILE
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
              "claimed_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if (why := why_unwritable(run_dir, folder=True)) is not None:
        raise _unwritable(run_dir, why, dir_key)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        raise _taken(run_dir, dir_key) from None
    except OSError as exc:  # what the check above cannot see (a full disk, a read-only mount)
        raise _unwritable(run_dir, exc.strerror or str(exc), dir_key) from None
    try:  # the claim is made; this only says whose (a full disk: the run's first write reports it)
        with contextlib.suppress(OSError):
            os.write(fd, json.dumps(holder).encode() + b"\n")
    finally:
        os.close(fd)
    return key


def _taken(run_dir: Path, dir_key: str) -> ConfigError:
    try:
        holder = json.loads((run_dir / CLAIM_FILE).read_text())
        by = f" (pid {holder['pid']} on {holder['host']}, since {holder['claimed_at']})"
    except (OSError, ValueError, KeyError, TypeError):  # being written this very moment
        by = ""
    return ConfigError(dir_key, f"{run_dir} is taken by another run{by}; this run is refused and "
                                   "writes nothing there: pick another directory")


def _unwritable(run_dir: Path, why: str, dir_key: str) -> ConfigError:
    return ConfigError(dir_key, f"cannot write the run directory {run_dir}: {why}",
                       hint=f"pick a directory you can write, e.g. {dir_key}=outputs/my_run")


def refuse(error: BaseException) -> NoReturn:
    """Print ``error`` as the CLI does and exit with its code, 2 for bad input (a full disk is 1): a SystemExit,
    which Hydra's callbacks and jobs let through, past Hydra's error printing."""
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(getattr(error, "exit_code", EXIT_CONFIG_ERROR))


def current_run_dir(command: str = "train") -> Path:
    """A fresh unique folder where the CLI's ``command`` puts its runs (the CLI passes Hydra's output dir itself)."""

    def new_run_dir() -> str:  # the CLI's layout; the random suffix keeps two runs started in one second apart
        run_dir = Path("outputs") / command / time.strftime("%Y-%m-%d") / f"{time.strftime('%H-%M-%S')}_{uuid.uuid4().hex[:6]}"
        run_dir.mkdir(parents=True, exist_ok=False)
        return str(run_dir.absolute() if launch.started_together() else run_dir)

    return Path(launch.rank_zero_decides("run_dir", new_run_dir))  # ranks started together: rank 0's


def write_metrics(path: Path, metrics: dict[str, Any], failing: bool) -> ModelforgeError | None:
    """Write metrics.json. A write that fails (a read-only or full run directory) is one line: while a run is
    failing, printed now (the run's own error follows); otherwise returned, for the caller to raise once it has
    printed the run's figures."""
    try:
        write_json(path, metrics)
    except OSError as exc:
        if failing:  # raised, it would hide the run's own error
            print(f"error: {write_error_line(exc)}", file=sys.stderr)
            return None
        fault = write_fault(exc, path.parent, "the run finished (its figures are printed above), but metrics.json "
                                              "does not record them")
        if fault is None:
            raise
        return fault
    return None
