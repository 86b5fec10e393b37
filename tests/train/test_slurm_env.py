"""Training launched by SLURM's srun, as far as a machine without SLURM allows: real processes given the
environment srun gives its tasks (SLURM_PROCID, SLURM_NTASKS, ...), which Lightning's SLURMEnvironment reads,
train together as one run, into one run directory; a task that dies, and a SIGTERM to every task (scancel,
the time limit), end the run with an honest status and exit code."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from lightning_fabric.plugins.environments import SLURMEnvironment

from modelforge.errors import ConfigError
from modelforge.train import launch
from modelforge.train.trainer import check_trainer_options
from tests.conftest import REPO
from tests.helpers.run_config import compose_train, tiny_cli_args
from tests.helpers.signals import wait_for

DDP = ("trainer=ddp_cpu", "model=mlp", "model.hidden_sizes=[16]", "sched=none", "trainer.limit_val_batches=1",
       "trainer.limit_test_batches=1")
LAUNCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "TORCHELASTIC_RUN_ID")


def _free_slurm_port() -> int:
    """A free port that SLURMEnvironment derives from a job id: 15000 + its last four digits."""
    for port in random.sample(range(15000, 25000), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 15000-24999")


def _task_env(rank: int, port: int, ntasks: int = 2) -> dict[str, str]:
    """What srun --nodes=1 --ntasks-per-node=2 sets for task ``rank`` of job 9xxxx (the rest of a real job's is unread)."""
    return {"SLURM_JOB_ID": f"9{port - 15000:04d}", "SLURM_STEP_ID": "0", "SLURM_JOB_NAME": "modelforge",
            "SLURM_NTASKS": str(ntasks), "SLURM_NTASKS_PER_NODE": str(ntasks), "SLURM_NNODES": "1",
            "SLURM_NODEID": "0", "SLURM_NODELIST": "127.0.0.1", "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)}


def _start_tasks(cwd: Path, *args: str, delay_s: float = 0.0) -> list[subprocess.Popen]:
    """Task 1, then (``delay_s`` later) task 0 of a two-task step: `python -m modelforge train ARGS` each."""
    port, procs = _free_slurm_port(), []
    for rank in (1, 0):
        env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and k != "PYTEST_CURRENT_TEST"}
        env.update(HYDRA_FULL_ERROR="0", OMP_NUM_THREADS="1", **_task_env(rank, port),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))  # run from elsewhere
        procs.append(subprocess.Popen([sys.executable, "-m", "modelforge", "train", *args], cwd=cwd, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        time.sleep(delay_s if rank else 0)
    return procs[::-1]  # by rank


def _finish(procs: list[subprocess.Popen], limit_s: float = 180) -> list[tuple[int, str]]:
    ended = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise AssertionError(f"task pid {proc.pid} still running after {limit_s} s") from None
        ended.append((proc.returncode, err))
    return ended


def _intact(run_dir: Path) -> None:
    yaml.safe_load((run_dir / "config.yaml").read_text())
    for ckpt in (run_dir / "checkpoints").glob("*.ckpt"):
        assert torch.load(ckpt, weights_only=True)["state_dict"], ckpt


def test_srun_tasks_are_read_as_lightning_reads_them(tiny_mnist: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in LAUNCH_VARS:  # absent, and so again after the test (SLURMEnvironment sets MASTER_ADDR/PORT)
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    for key, value in _task_env(1, 16234).items():
        monkeypatch.setenv(key, value)
    slurm = SLURMEnvironment()
    assert SLURMEnvironment.detect() and launch.external_launcher() == "srun"
    assert (launch.world_size(), launch.global_rank()) == (slurm.world_size(), slurm.global_rank()) == (2, 1)
    assert launch.started_together() and slurm.main_port == 16234  # where rank 0 hosts the store, as the group
    for key, value in _task_env(0, 16234).items():  # a Trainer sets Lightning's rank_zero_only.rank: keep it 0
        monkeypatch.setenv(key, value)
    trainer = compose_train(tiny_mnist, "trainer=ddp_cpu").trainer
    check_trainer_options(dict(trainer))  # 2 devices = --ntasks-per-node=2
    with pytest.raises(ConfigError, match=r"^trainer.devices: srun started 2 process\(es\), 2 per node on 1 node"
                                          r"\(s\), but the trainer asks for 1 device\(s\)(?s:.*)hint: trainer.devices=2"):
        check_trainer_options({**trainer, "devices": 1})  # Lightning itself would not check it under srun
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")  # srun --pty bash: Lightning launches, as without SLURM
    assert not SLURMEnvironment.detect() and launch.external_launcher() is None and launch.global_rank() == 0
    monkeypatch.setenv("SLURM_JOB_NAME", "modelforge")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "t")  # torchrun inside an allocation: torchrun's ranks, as for Lightning
    monkeypatch.setenv("RANK", "0")
    assert launch.external_launcher() == "torchrun" and launch.global_rank() == 0


@pytest.mark.e2e
@pytest.mark.slow  # 11 s: the srun signal and dead-task tests stay in the default run
def test_two_srun_tasks_train_one_run_in_one_dir(tiny_mnist: Path, tmp_path: Path) -> None:
    # Task 1 starts 1.5 s before task 0: its clock's time (and its random suffix) would name another directory.
    procs = _start_tasks(tmp_path, *tiny_cli_args(tiny_mnist), *DDP, "trainer.max_epochs=2", delay_s=1.5)
    for code, err in _finish(procs):
        assert code == 0, err[-3000:]
    [metrics_file] = (tmp_path / "outputs").rglob("metrics.json")
    run_dir = metrics_file.parent
    assert list((tmp_path / "outputs" / "train").iterdir()) == [run_dir.parent]
    assert list(run_dir.parent.iterdir()) == [run_dir]
    metrics = json.loads(metrics_file.read_text())
    assert metrics["status"] == "finished" and metrics["global_step"] == 4  # 2 of the 4 batches per task and epoch
    assert json.loads((run_dir / ".run_claim").read_text())["pid"] == procs[0].pid  # task 0 claimed, alone
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in (run_dir / "train_ddp_process_1.log").read_text()
    assert yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]["job"]["name"] == "train"


def _endless(tiny_mnist: Path, run_dir: Path) -> list[subprocess.Popen]:
    procs = _start_tasks(run_dir.parent, *tiny_cli_args(tiny_mnist), *DDP, "trainer.max_epochs=100000",
                         f"hydra.run.dir={run_dir}")
    wait_for(run_dir / "checkpoints" / "last.ckpt", procs[0])
    return procs


@pytest.mark.e2e
def test_a_task_that_dies_fails_the_run_and_leaves_the_earlier_files(tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = _endless(tiny_mnist, run)
    procs[1].kill()  # out of memory, a node lost; no launcher stops task 0 (srun without --kill-on-bad-exit)
    (code, err), (lost, _) = _finish(procs, limit_s=60)
    assert (code, lost) == (1, -signal.SIGKILL), err[-3000:]  # task 0 ended by itself, as a failure
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["error"]  # gloo's word: the peer's connection closed
    _intact(run)


@pytest.mark.e2e
@pytest.mark.slow  # 12 s: test_torchrun's SIGTERM to the group stays in the default run
def test_sigterm_to_every_task_stops_them_at_one_step(tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = _endless(tiny_mnist, run)
    for proc in procs:  # scancel, or the time limit: SIGTERM to every task at once
        proc.send_signal(signal.SIGTERM)
    for code, err in _finish(procs, limit_s=60):
        assert code == 128 + signal.SIGTERM and "error: stopped by SIGTERM" in err, err[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "terminated" and metrics["resume_with"] == f"ckpt_path={run / 'checkpoints' / 'interrupted.ckpt'}"
    _intact(run)
