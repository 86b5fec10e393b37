"""The plumbing of a device session that cannot lose its results: an overall deadline it keeps, each command a
process group of its own (killed with its children on a timeout, a stop, or the session's death), and a record
rewritten atomically after every change, so a session cut short at any point keeps every row it finished.

bench_gpu.py defines the rows; this runs them. Nothing here knows about modelforge's figures.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from results_md import write_atomic

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a child gets when its parent dies
START_MARGIN_S = 10.0  # no row starts with less left than this; a row's limit keeps half of it for the record
STOP_GRACE_S = 5.0  # a stopped command's group gets SIGTERM, then SIGKILL after this
TAIL_CHARS = 1500  # of a failed command's error output, kept in its row


class SessionStopped(BaseException):  # not an Exception: no row's handler may swallow it
    """SIGTERM or SIGINT reached the session: the row in flight is stopped and recorded, the rest are not run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`SessionStopped` in the session (its handlers restored after)."""
    def handler(signum: int, _: Any) -> None:
        raise SessionStopped(signum)

    saved = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)


@dataclass
class Deadline:
    """Seconds left of the session's budget, counted from its start; no row starts with less than ``margin`` left."""

    seconds: float
    margin: float = START_MARGIN_S
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def limit(self, timeout_s: float) -> float:
        """A row's own limit, clipped to the time left (less half the margin: its record is written after)."""
        return max(min(timeout_s, self.left() - self.margin / 2), 0.5)

    def elapsed(self) -> float:
        return time.monotonic() - self.start


@dataclass
class Finished:
    """What one command did: its exit code (None: killed at its limit), seconds, and output files."""

    exit: int | None
    seconds: float
    stdout: str
    stderr: str
    limit_s: float

    @property
    def timed_out(self) -> bool:
        return self.exit is None

    def error_tail(self) -> str:
        return self.stderr.strip()[-TAIL_CHARS:]


def _die_with_parent(parent: int) -> Callable[[], None]:
    def before_exec() -> None:  # in the child, between fork and exec
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the session died before the prctl took effect
            os._exit(1)
    return before_exec


def run_command(argv: Sequence[str], env: Mapping[str, str], limit_s: float, logs: Path,
                on_start: Callable[[int], None] = lambda pid: None, cwd: Path | None = None) -> Finished:
    """Run ``argv`` as a process group of its own for at most ``limit_s`` seconds; its output goes to files in
    ``logs`` (kept beside the run). A timeout or a stop of the session ends the whole group; a SIGKILL of the
    session ends the command too (Linux's parent-death signal), so nothing runs on as an orphan."""
    logs.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs / "stdout.txt", logs / "stderr.txt"
    start = time.monotonic()
    with out_path.open("w") as out, err_path.open("w") as err:
        process = subprocess.Popen(list(argv), stdout=out, stderr=err, env=dict(env), cwd=cwd, start_new_session=True,
                                   preexec_fn=_die_with_parent(os.getpid()))
        on_start(process.pid)
        try:
            code: int | None = process.wait(timeout=max(limit_s, 0.1))
        except subprocess.TimeoutExpired:
            code = None
            _end_group(process)
        except BaseException:
            _end_group(process)
            raise
    return Finished(code, round(time.monotonic() - start, 2), out_path.read_text(errors="replace"),
                    err_path.read_text(errors="replace"), round(limit_s, 1))


def _end_group(process: subprocess.Popen) -> None:
    """SIGTERM to the command's group (a run saves and says so), SIGKILL after :data:`STOP_GRACE_S`."""
    for signum, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


class SessionRecord:
    """The session's JSON (every planned row, from the start) and the Markdown rebuilt from it, both replaced
    atomically after every change: a kill at any moment leaves the last complete version of each."""

    def __init__(self, path: Path, header: dict[str, Any], rows: list[dict[str, Any]],
                 summarize: Callable[[list[dict[str, Any]]], dict[str, Any]],
                 rebuild: Callable[[], object] | None = None) -> None:
        self.path, self.summarize, self.rebuild = path, summarize, rebuild
        self.data = {**header, "status": "running", "rows": rows}
        self.save()

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.data["rows"]

    def update(self, index: int, **values: Any) -> None:
        self.rows[index].update(values)
        self.save()

    def finish(self, status: str, **values: Any) -> None:
        self.data.update(status=status, **values)
        self.save()

    def save(self) -> None:
        self.data.update(self.summarize(self.rows))
        write_atomic(self.path, json.dumps(_finite(self.data), indent=2, allow_nan=False, default=str) + "\n")
        if self.rebuild is not None:
            self.rebuild()


def _finite(value: Any) -> Any:
    """Strict JSON: a NaN or inf figure (a diverged run's loss) as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def run_rows(record: SessionRecord, deadline: Deadline, run_one: Callable[[int], dict[str, Any]],
             skip: Callable[[int], str | None] = lambda index: None) -> str:
    """Run the record's rows in order: each marked running, then given what ``run_one(index)`` returns. A row that
    ``skip`` names a reason for, or that the deadline leaves less than its margin for, is recorded as not run. SIGTERM or SIGINT stops the row in flight (recorded as interrupted) and ends the session with
    ``SystemExit(128 + signal)``. Returns the session's status: finished, or deadline if rows were left out."""
    status, index = "finished", -1
    with stop_on_signals():
        try:
            for index in range(len(record.rows)):
                if (why := skip(index)) is not None:
                    record.update(index, status="not run", exit="not run", why=why)
                    continue
                if (left := deadline.left()) < deadline.margin:
                    record.update(index, status="not run", exit="not run",
                                  why=f"the session's deadline ({deadline.seconds:.0f} s) left {max(left, 0):.0f} s")
                    status = "deadline"
                    continue
                record.update(index, status="running", started_s=round(deadline.elapsed(), 1))
                record.update(index, **run_one(index))
        except SessionStopped as stop:  # wherever it came: in a row, or while the record was written
            for signum in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the record short
                signal.signal(signum, signal.SIG_IGN)
            if 0 <= index < len(record.rows) and record.rows[index]["status"] == "running":
                record.rows[index].update(status="interrupted", exit="interrupted",
                                          why=f"{stop} stopped the session {deadline.elapsed():.0f} s in, while this "
                                              "row ran")
            record.finish("terminated", stopped_by=str(stop))
            raise SystemExit(128 + stop.signum) from None
        record.finish(status)
    return status
