"""Shared fixtures: the repo root, and runners of the CLI in this process and as a subprocess."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Under pytest-xdist (the default run: pyproject's addopts), N workers share the cores: each
# worker, and every `python -m modelforge` it starts, gets cores/N torch threads instead of all of
# them, so the workers do not slow each other down by oversubscribing the CPU.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# Runs keep gunzipped data in $XDG_CACHE_HOME/modelforge/decoded: the tests (and the commands
# they start, which inherit this) keep theirs in a folder of their own, never in the user's home.
_TEST_CACHE = tempfile.mkdtemp(prefix="mf_test_xdg_cache_")
os.environ["XDG_CACHE_HOME"] = _TEST_CACHE
atexit.register(shutil.rmtree, _TEST_CACHE, ignore_errors=True)
# The model options the package ships, as Hydra lists them (sorted, comma-separated).
SHIPPED_MODELS = ", ".join(sorted(path.stem for path in (REPO / "conf" / "model").glob("*.yaml")))

REAL_MNIST = Path(os.environ.get("MODELFORGE_REAL_MNIST", REPO.parent / "shared" / "datasets" / "mnist"))


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a process a test starts: ours plus ``extra``, Hydra's one-line errors, and without
    pytest's PYTEST_CURRENT_TEST (modelforge would take the child for a test itself)."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **extra}
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


# The data sets and the run below are made once per test process (xdist worker) and only read by the tests.
@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """96 train / 32 test learnable images in the four IDX files."""
    from tests.helpers.mnist_idx import write_mnist_idx

    folder = tmp_path_factory.mktemp("tiny_data")
    write_mnist_idx(folder, n_train=96, n_test=32)
    return folder


@pytest.fixture(scope="session")
def tiny_mnist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """160 train / 64 test learnable 28x28 images in the four standard IDX files."""
    from tests.helpers.mnist_idx import write_mnist_idx

    folder = tmp_path_factory.mktemp("tiny_mnist")
    write_mnist_idx(folder, n_train=160, n_test=64)
    return folder


@pytest.fixture(scope="session")
def small_cnn_run(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of one epoch of a small cnn (tests.helpers.small_runs.SMALL_CNN) on tiny_mnist: for the
    tests that load, export, resume or evaluate a trained run and leave it as it is."""
    from tests.helpers.small_runs import train_small_cnn

    return train_small_cnn(tiny_mnist, tmp_path_factory.mktemp("small_cnn") / "run")


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m modelforge ARGS` as a user would; returns the finished process."""
    full_env = child_env(**(env or {}))
    return subprocess.run([sys.executable, "-m", "modelforge", *args], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli():
    """`python -m modelforge` in a subprocess: for what needs a process of its own (signals, DDP, launchers)."""
    return run_cli


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_main(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run ``modelforge.__main__.main(argv)`` in this process (real Hydra), as the CLI would.

    Much faster than a subprocess; Hydra clears its global state after each command.
    """
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from modelforge.__main__ import main

    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    # Hydra takes any trace function for a debugger and then raises a job's error instead of reporting it; under
    # coverage (pytest --cov) there is one: a command in a process of its own has none.
    monkeypatch.setattr("hydra._internal.utils.is_under_debugger", lambda: False)

    def run(*args: str, cwd: Path | None = None) -> CliResult:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        captured = (sys.stdout, sys.stderr)
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            GlobalHydra.instance().clear()
            HydraConfig.instance().cfg = None  # as after a real process: a later train() is not "under Hydra"
            # Hydra's job logging replaced the root handlers with ones writing to this test's capture.
            root.handlers[:] = handlers
            root.setLevel(level)
            _follow_current_streams(captured)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


class _CurrentStream:
    """Writes to whatever ``sys.stdout`` / ``sys.stderr`` is at the time of writing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, text: str) -> int:
        return getattr(sys, self.name).write(text)

    def flush(self) -> None:
        getattr(sys, self.name).flush()


def _follow_current_streams(captured: tuple[object, object]) -> None:
    """Handlers a library added during a command (optuna adds one to its logger, once per process)
    keep this test's capture, closed after it; in a process of its own they would write to the
    process's stderr: point them at the current stream instead."""
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and stream in captured:
                handler.setStream(_CurrentStream("stdout" if stream is captured[0] else "stderr"))


# What makes a test an integration test when it says nothing itself: it asks for the CLI run in this process or
# for tiny data to train on, or its module imports the training entry points, Lightning, or a small Lightning run.
INTEGRATION_FIXTURES = frozenset({"run_main", "tiny_data", "tiny_mnist", "small_run", "sweep_here", "tiny_args"})
# What makes a test e2e when it says nothing itself: its own code starts a process (run_cli is `python -m
# modelforge` in a subprocess).
PROCESS_NAMES = frozenset({"run_cli", "subprocess", "Popen", "check_output", "run_script", "run_process"})


def _names_called(item: pytest.Item) -> set[str]:
    """The global and attribute names the test function's own code uses (its nested functions' too)."""
    code, names = getattr(getattr(item, "function", None), "__code__", None), set()
    stack = [code] if code is not None else []
    while stack:
        code = stack.pop()
        names |= set(code.co_names)
        stack += [c for c in code.co_consts if hasattr(c, "co_names")]
    return names


INTEGRATION_NAMES = frozenset({"train", "evaluate", "compose_train", "pl", "LitTiny", "Trainer", "train_small_cnn",
                               "train_mlp", "train_on_folder"})


def cost_marker(item: pytest.Item) -> str:
    """The marker that says what ``item`` costs: its own ``e2e`` (a process of its own) or ``integration`` when
    it has one, else ``integration`` when it runs real parts together in this process, else ``unit``."""
    for name in ("e2e", "integration"):
        if item.get_closest_marker(name):
            return name
    if "cli" in getattr(item, "fixturenames", ()) or PROCESS_NAMES & _names_called(item):  # a process of its own
        return "e2e"
    module = getattr(item, "module", None)
    if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())) or (
            module is not None and INTEGRATION_NAMES & set(vars(module))):
        return "integration"
    return "unit"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test carries one of ``unit`` / ``integration`` / ``e2e`` (``-m unit`` is the quick loop)."""
    for item in items:
        cost = cost_marker(item)
        if not item.get_closest_marker(cost):
            item.add_marker(cost)


# Rough seconds of one test of each kind on an idle core: what orders the files of a run, longest first.
SECONDS = {"unit": 0.1, "integration": 1.0, "e2e": 5.0}


class _LongestFirst:
    """Orders the files whose selected tests cost most first, the rest in their usual order.

    xdist (``--dist loadfile``) hands out whole files in this order: starting the files
    that take longest first keeps one worker from being left with a long file at the end.
    """

    @pytest.hookimpl(trylast=True)  # after -m deselected: only the tests that run count
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        cost: Counter[str] = Counter()
        for item in items:
            # a parametrized test's later cases mostly repeat its first one's cheap path: counted once in all
            weight = next(s for name, s in SECONDS.items() if item.get_closest_marker(name))
            cost[_file_of(item)] += weight if getattr(item, "callspec", None) is None else weight / 3
        items.sort(key=lambda item: -cost[_file_of(item)])  # a stable sort: a file's tests stay in their order


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_LongestFirst(), "modelforge-longest-first")


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.partition("::")[0]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The lines tests recorded with ``record_property("summary", line)``, at the end of the run (the
    torchvision parity tests' largest differences). Under xdist a worker's own output never reaches the
    terminal; a test report's properties do."""
    lines = [value for report in terminalreporter.stats.get("passed", [])
             for name, value in getattr(report, "user_properties", []) if name == "summary"]
    if lines:
        terminalreporter.section("recorded by the tests")
        for line in lines:
            terminalreporter.write_line(line)
