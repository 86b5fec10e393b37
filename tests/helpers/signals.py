"""Start a real ``python -m modelforge train`` subprocess and signal it once training runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, child_env


def start_train(*args: str, cwd: Path = REPO) -> subprocess.Popen:
    env = child_env()
    # SIGINT as in a terminal: a test run started in the background (`pytest &`) has SIGINT ignored,
    # children inherit that, and Python then keeps ignoring it (no KeyboardInterrupt): Ctrl-C is untestable.
    return subprocess.Popen([sys.executable, "-m", "modelforge", "train", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for(path: Path, proc: subprocess.Popen, limit_s: float = 120) -> None:
    """Until ``path`` exists (training reached that point); fails if the process ended first."""
    deadline = time.monotonic() + limit_s
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended (rc {proc.returncode}) before {path} appeared:\n{err[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} did not appear")
        time.sleep(0.05)


def signal_and_wait(proc: subprocess.Popen, signum: int, limit_s: float = 120) -> tuple[int, str, str]:
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the run did not stop within {limit_s} s of {signal.Signals(signum).name}:\n{err[-3000:]}")
    return proc.returncode, out, err
