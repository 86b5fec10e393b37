"""The device script's plumbing (experiments/benchmarks/gpu_session.py, bench_gpu.py): a deadline it keeps, a row
past its limit ended with its children, and a session killed halfway (real SIGTERM, real SIGKILL) that keeps every
row it finished in its JSON and leaves no command running. Real processes throughout; the quick tests run small
commands, the slow ones ``run.py --only gpu --accelerator cpu`` itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "experiments" / "benchmarks"
sys.path.insert(0, str(BENCH))
import gpu_session  # noqa: E402

pytestmark = pytest.mark.e2e


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its parent, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _gone(pid: int, within_s: float = 5.0) -> bool:
    end = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return not _alive(pid)


def test_a_command_past_its_limit_is_ended_with_its_children(tmp_path: Path) -> None:
    spawns = "import subprocess, time; child = subprocess.Popen(['sleep', '60']); print(child.pid, flush=True); time.sleep(60)"
    finished = gpu_session.run_command([sys.executable, "-c", spawns], os.environ, 1.0, tmp_path / "logs")
    assert finished.timed_out and finished.exit is None and finished.seconds < 8
    assert _gone(int(finished.stdout.split()[0]))  # the command's own child too: the group was ended
    assert (tmp_path / "logs" / "stdout.txt").read_text() == finished.stdout  # its output kept beside the run


def _rows(*names: str) -> list[dict]:
    return [{"name": name, "status": "pending"} for name in names]


def test_the_deadline_clips_the_row_in_flight_and_the_rest_are_recorded_as_not_run(tmp_path: Path) -> None:
    commands = [["true"], ["sleep", "60"], ["true"]]  # the second asks for 60 s with 3 s left in all
    record = gpu_session.SessionRecord(tmp_path / "gpu.json", {}, _rows("quick", "hangs", "after"), lambda rows: {})
    deadline = gpu_session.Deadline(3.0, margin=1.0)

    def run_one(index: int) -> dict:
        finished = gpu_session.run_command(commands[index], os.environ, deadline.limit(60), tmp_path / str(index))
        return {"status": "timeout" if finished.timed_out else "done", "seconds": finished.seconds,
                "limit_s": finished.limit_s}

    assert gpu_session.run_rows(record, deadline, run_one) == "deadline"
    assert deadline.elapsed() < 4.5  # kept: the hang was ended at the time left, not at its own 60 s
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert [r["status"] for r in saved["rows"]] == ["done", "timeout", "not run"] and saved["status"] == "deadline"
    assert saved["rows"][1]["limit_s"] < 3.0 and "the session's deadline (3 s) left" in saved["rows"][2]["why"]


# A session of three rows (two quick commands, then one that hangs), as bench_gpu.py runs its rows.
DRIVER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import gpu_session

    out = Path(sys.argv[2])
    commands = [["true"], ["true"], ["sleep", "60"]]
    rows = [{"name": f"row {i}", "status": "pending"} for i in range(3)]
    record = gpu_session.SessionRecord(out / "gpu.json", {}, rows, lambda rows: {})

    def run_one(index):
        finished = gpu_session.run_command(commands[index], os.environ, 60, out / str(index),
                                           on_start=lambda pid: record.update(index, pid=pid))
        return {"status": "done", "exit": finished.exit}

    gpu_session.run_rows(record, gpu_session.Deadline(120), run_one)
""")


def _wait_for(path: Path, ready, timeout_s: float = 60.0) -> dict:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            data = json.loads(path.read_text())  # never half a file: each version replaces the last whole
        except FileNotFoundError:
            data = None
        if data is not None and ready(data):
            return data
        time.sleep(0.05)
    raise AssertionError(f"{path} never got there: {path.read_text() if path.exists() else 'no file'}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_session_killed_halfway_keeps_its_finished_rows_and_leaves_nothing_running(tmp_path: Path,
                                                                                     signum: int) -> None:
    session = subprocess.Popen([sys.executable, "-c", DRIVER, str(BENCH), str(tmp_path)], stderr=subprocess.PIPE,
                               text=True)
    running = _wait_for(tmp_path / "gpu.json", lambda d: d["rows"][2]["status"] == "running" and "pid" in d["rows"][2])
    session.send_signal(signum)
    _, stderr = session.communicate(timeout=30)
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert [r["status"] for r in saved["rows"][:2]] == ["done", "done"] and saved["rows"][0]["exit"] == 0
    if signum == signal.SIGTERM:  # the row in flight stopped and said so; the session's exit is 128 + 15
        assert session.returncode == 143 and "Traceback" not in stderr
        assert saved["rows"][2]["status"] == "interrupted" and saved["status"] == "terminated"
        assert saved["rows"][2]["why"].startswith("SIGTERM stopped the session")
    else:  # nothing could be written: the row stays "running", and the version before the kill is whole
        assert session.returncode == -signal.SIGKILL and saved["rows"][2]["status"] == "running"
    assert _gone(running["rows"][2]["pid"])  # the hanging command ended with the session, even after a SIGKILL
    assert not list(tmp_path.glob(".gpu.json.*"))  # no temp file left of an atomic rewrite


@pytest.mark.slow  # run.py starts a training process per row: about 30 s on 2 cores
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_device_script_killed_halfway_keeps_its_finished_rows(tmp_path: Path, signum: int) -> None:
    from tests.conftest import REAL_MNIST

    if not (REAL_MNIST / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(f"real MNIST not found at {REAL_MNIST}")
    results = tmp_path / "results"
    session = subprocess.Popen([sys.executable, str(BENCH / "run.py"), "--only", "gpu", "--accelerator", "cpu",
                                "--gpu-rows", "swa,sweep", "--results-dir", str(results), "--data-dir", str(REAL_MNIST)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    running = _wait_for(results / "gpu.json", lambda d: d["rows"][0]["status"] == "done"
                        and d["rows"][1]["status"] == "running" and "pid" in d["rows"][1], timeout_s=180)
    session.send_signal(signum)
    output, _ = session.communicate(timeout=60)
    saved = json.loads((results / "gpu.json").read_text())
    swa, sweep = saved["rows"]
    assert swa["status"] == "done" and swa["exit"] == 2 and swa["refused"][0].startswith("error: cuda_graph: callbacks.swa")
    assert swa["name"] in (results / "RESULTS.md").read_text()  # the finished row is in the Markdown too
    expected = ("interrupted", 143) if signum == signal.SIGTERM else ("running", -signal.SIGKILL)
    assert (sweep["status"], session.returncode) == expected, output[-2000:]
    assert _gone(running["rows"][1]["pid"], within_s=15)
