"""Tiny generated MNIST, a runner for `python -m modelforge train` sweeps on it, and a PostgreSQL server of the
tests' own for studies shared by several processes."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.mnist_idx import write_mnist_idx
from tests.helpers.sweep_summary import read_summary  # noqa: F401  moved; for branches written before


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_mnist_sweep")
    write_mnist_idx(folder, n_train=64, n_test=32)
    return folder


@pytest.fixture
def tiny_args(tiny_data: Path) -> list[str]:
    """Overrides that train on the tiny data, quietly, without drawing each job's learning curves (~0.5 s a job;
    tests/train/test_curves.py asks for them)."""
    return [f"data.data_dir={tiny_data}", "data.verify=false", "data.download=false", "data.val_size=16",
            "data.batch_size=16", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
            "curves=false"]


@pytest.fixture
def sweep(cli, tmp_path: Path, tiny_args: list[str]) -> Callable[..., subprocess.CompletedProcess]:
    """Run `train -m ARGS` on tiny data into tmp_path/sweep, from tmp_path (nothing lands in the repo)."""

    def run(*args: str, sweep_dir: Path | None = None) -> subprocess.CompletedProcess:
        target = sweep_dir or tmp_path / "sweep"
        return cli("train", "-m", *args, *tiny_args, f"hydra.sweep.dir={target}", cwd=tmp_path)

    return run


@pytest.fixture
def sweep_here(run_main, tmp_path: Path, tiny_args: list[str]) -> Callable[..., Any]:
    """`train -m ARGS` as :func:`sweep` does, in this process (Hydra's basic launcher runs jobs here anyway)."""

    def run(*args: str, sweep_dir: Path | None = None) -> Any:
        target = sweep_dir or tmp_path / "sweep"
        return run_main("train", "-m", *args, *tiny_args, f"hydra.sweep.dir={target}", cwd=tmp_path)

    return run


def _postgres_program(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, or where Debian's ``postgresql`` package puts it (off PATH)."""
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server started for these tests (its own data folder, a Unix socket in a temp dir, no TCP),
    stopped after them: the SQLAlchemy URL of its ``postgres`` database. Skipped, with the reason, where no
    server can start."""
    pytest.importorskip("psycopg", reason="a study in PostgreSQL needs a driver: pip install 'psycopg[binary]'")
    initdb, pg_ctl = _postgres_program("initdb"), _postgres_program("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server programs (initdb, pg_ctl): apt-get install postgresql")
    as_owner: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="mf_pg_"))  # short: a socket path must fit in 107 bytes
    if os.geteuid() == 0:  # the server refuses to run as root: run it as the postgres user
        if shutil.which("runuser") is None or shutil.which("id") is None or subprocess.run(
                ["id", "postgres"], capture_output=True).returncode != 0:
            pytest.skip("running as root, and no postgres user to run the PostgreSQL server as")
        shutil.chown(root, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    data, log = root / "data", root / "server.log"

    def run(*command: str) -> subprocess.CompletedProcess:
        return subprocess.run([*as_owner, *command], capture_output=True, text=True, timeout=120)

    made = run(initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync")
    started = made.returncode == 0 and run(pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
                                           f"-k {root} -c listen_addresses='' -c fsync=off", "start").returncode == 0
    try:
        if not started:
            reason = made.stderr.strip() or (log.read_text() if log.exists() else "pg_ctl start failed")
            pytest.skip(f"the PostgreSQL server did not start: {reason[-500:]}")
        yield f"postgresql+psycopg://postgres@/postgres?host={root}"
    finally:
        if started:
            run(pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
