"""Where a run's wall time goes, training and the rest: the phases its ``metrics.json`` records as ``timings``.

``before_train_s`` is the run's set-up before ``train()``: for the first run of a process, the process's age
(interpreter start, imports, Hydra's composition and the config checks, which build the model and read the data
files); for a later one (the next job of a sweep, a second ``train()`` from Python), the time since the run before
it ended (the sweep composing and launching this job). The phases after it are timed here.
"""

from __future__ import annotations

import os
import time

# perf_counter() when the last run of this process ended: the next one's set-up is timed from there.
_previous_run_end: float | None = None


# Set by run.py just before it execs the command: the process it execs keeps run.py's start time, and so its age
# would count run.py's set-up (a first call's installs).
EXEC_AT_VAR = "MODELFORGE_EXEC_AT"


def process_age_s() -> float | None:
    """Seconds since this process started (from ``/proc`` on Linux; None elsewhere), or since run.py exec'd it."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            started_ticks = int(stat.read().rpartition(")")[2].split()[19])  # field 22: starttime
            age = float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    try:  # a child of the exec'd command (a DDP rank, a sweep job) is younger still: the smaller of the two
        age = min(age, time.time() - float(os.environ[EXEC_AT_VAR]))
    except (KeyError, ValueError):
        pass
    return round(age, 2)


class Phases:
    """Consecutive phases of a run, each timed from the end of the one before; :meth:`close` when the run ends."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.first_in_process = _previous_run_end is None
        self.before_train_s = process_age_s() if self.first_in_process else \
            round(self._last - _previous_run_end, 2)
        self.seconds: dict[str, float] = {}

    def end(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[f"{phase}_s"] = round(now - self._last, 2)
        self._last = now

    def close(self) -> None:
        """The run has ended (however it ended): the next run in this process times its set-up from now."""
        global _previous_run_end
        _previous_run_end = time.perf_counter()

    def record(self) -> dict[str, float | None]:
        return {"before_train_s": self.before_train_s, **self.seconds}

    def line(self) -> str:
        """``time: 3.9 s to train() (imports, composition, checks), prepare 0.8 s, fit 7.3 s, test 0.5 s``."""
        parts = [f"{name.removesuffix('_s')} {value:.2f} s" for name, value in self.seconds.items()]
        setup = "imports, composition, checks" if self.first_in_process else "composition, checks"
        before = f"{self.before_train_s:.2f} s to train() ({setup}), " if self.before_train_s is not None else ""
        return f"time: {before}{', '.join(parts)}"
