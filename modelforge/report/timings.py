"""Where a run's wall time goes, training and the rest: the phases its ``metrics.json`` records as ``timings``.

``before_train_s`` is the process's age when ``train()`` starts: interpreter start, imports, Hydra's composition and
the config checks (which build the model and read the data files); the phases after it are timed here.
"""

from __future__ import annotations

import os
import time


def process_age_s() -> float | None:
    """Seconds since this process started (from ``/proc`` on Linux; None elsewhere)."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            started_ticks = int(stat.read().rpartition(")")[2].split()[19])  # field 22: starttime
            return round(float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError):
        return None


class Phases:
    """Consecutive phases of a run, each timed from the end of the one before."""

    def __init__(self) -> None:
        self.before_train_s = process_age_s()
        self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def end(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[f"{phase}_s"] = round(now - self._last, 2)
        self._last = now

    def record(self) -> dict[str, float | None]:
        return {"before_train_s": self.before_train_s, **self.seconds}

    def line(self) -> str:
        """``time: 3.9 s before train() ..., prepare 0.8 s, fit 7.3 s, test 0.5 s``."""
        parts = [f"{name.removesuffix('_s')} {value:.2f} s" for name, value in self.seconds.items()]
        before = f"{self.before_train_s:.2f} s to train() (imports, composition, checks), " \
            if self.before_train_s is not None else ""
        return f"time: {before}{', '.join(parts)}"
