"""Training started by torchrun (``python -m torch.distributed.run``), as on a cluster node: Lightning detects
torch elastic and starts no process; rank 0 picks one run directory for every rank and writes the records; the
results are those of Lightning's own launcher. Real torchrun processes on tiny data. (A rank that dies:
tests/train/test_slurm_env.py, where no agent stops the others.)"""

from __future__ import annotations

import inspect
import csv
import json
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml

from modelforge.errors import ConfigError
from modelforge.train import launch
from modelforge.train.records import claim_run_dir
from modelforge.train.trainer import check_trainer_options
from tests.conftest import REPO, child_env
from tests.helpers.run_config import compose_train, tiny_cli_args
from tests.helpers.signals import wait_for

# Two ranks of 2 batches each per epoch (128 training images, batches of 32).
DDP = ("trainer=ddp_cpu", "model=mlp", "model.hidden_sizes=[16]", "sched=none", "trainer.limit_val_batches=1",
       "trainer.limit_test_batches=1")
PATHS = {"run_dir", "config", "best_ckpt", "resume_with", "learning_curves"}  # where the files are: per run
TIMINGS = {"train_time_s", "timings"}


def _env() -> dict[str, str]:
    # One thread per rank in both launchers (torchrun sets it, Lightning's launcher would divide the cores):
    # the same arithmetic, so the same numbers.
    env = child_env(OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))  # run from elsewhere
    return env


def _start(command: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *command], cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen, limit_s: float = 180) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        raise AssertionError(f"still running after {limit_s} s:\n{err[-3000:]}") from None
    return proc.returncode, err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _outcome(run_dir: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    weights = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    return {k: v for k, v in metrics.items() if k not in PATHS | TIMINGS}, weights


@pytest.fixture(scope="module")
def lightning_run(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """The same training started by Lightning's own launcher (it re-runs the command for rank 1)."""
    run_dir = tmp_path_factory.mktemp("lightning") / "run"
    proc = _start(["-m", "modelforge", "train", *tiny_cli_args(tiny_mnist), *DDP, f"hydra.run.dir={run_dir}"],
                  run_dir.parent)
    code, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in (run_dir / "train_ddp_process_1.log").read_text()  # two processes
    assert [p.name for p in run_dir.parent.iterdir()] == ["run"]  # no directory per rank
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "finished"
    rows = list(csv.DictReader((run_dir / "logs" / "metrics.csv").read_text().splitlines(keepends=True)))
    # logged once, not per rank: the test once, the validation once an epoch
    assert sum(bool(r["test/acc"]) for r in rows) == 1
    val_epochs = [r["epoch"] for r in rows if r["val/acc"]]
    assert len(val_epochs) == len(set(val_epochs)) > 1
    return _outcome(run_dir)


def _assert_same(run_dir: Path, reference: tuple[dict, dict]) -> None:
    metrics, weights = _outcome(run_dir)
    assert metrics == reference[0]  # val/test metrics reduced over the ranks, steps, epochs, params...
    assert weights.keys() == reference[1].keys()
    assert all(torch.equal(weights[k], reference[1][k]) for k in weights)  # bit for bit


@pytest.mark.e2e
def test_torchrun_ranks_share_one_run_dir_and_train_as_lightnings_launcher(lightning_run, tiny_mnist: Path,
                                                                          tmp_path: Path) -> None:
    # No hydra.run.dir: each rank composes its own default (time + random suffix); rank 0's is taken by all.
    proc = _start(["-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "modelforge", "train",
                   *tiny_cli_args(tiny_mnist), *DDP], tmp_path)
    code, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert "sync_dist=True" not in err  # accuracy is synced by torchmetrics, and Lightning is told so
    [metrics_file] = (tmp_path / "outputs").rglob("metrics.json")
    run_dir = metrics_file.parent  # outputs/train/DATE/TIME_SUFFIX, the only one
    assert list((tmp_path / "outputs" / "train").iterdir()) == [run_dir.parent]
    assert list(run_dir.parent.iterdir()) == [run_dir]
    assert json.loads(metrics_file.read_text())["status"] == "finished"
    # Rank 1 was torchrun's (Lightning started no process: the group has 2 members), logs beside rank 0,
    # and left rank 0 the records (.hydra/ included).
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in (run_dir / "train_ddp_process_1.log").read_text()
    assert "GLOBAL_RANK: 1" not in (run_dir / "train.log").read_text()
    assert yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]["job"]["name"] == "train"
    trainer = yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]
    assert (trainer["devices"], trainer["num_nodes"]) == (2, 1)  # torchrun's --nproc_per_node, --nnodes
    _assert_same(run_dir, lightning_run)


@pytest.mark.e2e
@pytest.mark.slow  # 14 s: one node of several ranks stays in the default run
def test_two_torchrun_nodes_train_one_model(lightning_run, tiny_mnist: Path, tmp_path: Path) -> None:
    port, procs = _free_port(), []
    for node in (1, 0):  # the second node first: it waits for the first
        procs.append(_start(["-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}", "--nproc_per_node=1",
                             "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "modelforge", "train",
                             *tiny_cli_args(tiny_mnist), *DDP, "hydra.run.dir=run"], tmp_path))
    for proc in procs:
        code, err = _finish(proc)
        assert code == 0, err[-3000:]
    assert list(tmp_path.rglob("metrics.json")) == [tmp_path / "run" / "metrics.json"]
    trainer = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["trainer"]
    assert (trainer["devices"], trainer["num_nodes"]) == (1, 2)  # derived from torchrun: nothing to set
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in (tmp_path / "run" / "train_ddp_process_1.log").read_text()
    _assert_same(tmp_path / "run", lightning_run)  # one process on each of two nodes = two on one


@pytest.mark.e2e
@pytest.mark.slow  # 17 s: training on torchrun ranks stays in the default run
def test_eval_on_three_torchrun_ranks_counts_every_test_image_once(tiny_mnist: Path, tmp_path: Path) -> None:
    """64 test images on 3 ranks: Lightning's DistributedSampler would count 2 twice (and advise against it)."""
    from modelforge.train import evaluate, train

    train(compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=1"),
          run_dir=tmp_path / "run")
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    single = evaluate(compose_train(tiny_mnist, f"ckpt_path={ckpt}"), run_dir=tmp_path / "single")
    proc = _start(["-m", "torch.distributed.run", "--nproc_per_node=3", "-m", "modelforge", "eval",
                   *tiny_cli_args(tiny_mnist), "trainer=ddp_cpu", f"ckpt_path={ckpt}", "hydra.run.dir=ddp"], tmp_path)
    code, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert "DistributedSampler" not in err
    ddp = json.loads((tmp_path / "ddp" / "eval_metrics.json").read_text())
    assert ddp["test/acc"] == single["test/acc"] and round(ddp["test/acc"] * 64) == ddp["test/acc"] * 64
    assert ddp["test/loss"] == pytest.approx(single["test/loss"], rel=1e-6)  # the mean over all 64, not of 3 means


def _endless(tiny_mnist: Path, run_dir: Path) -> subprocess.Popen:
    return _start(["-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "modelforge", "train",
                   *tiny_cli_args(tiny_mnist), *DDP, "trainer.max_epochs=100000", f"hydra.run.dir={run_dir}"],
                  run_dir.parent)


def _intact(run_dir: Path) -> None:
    yaml.safe_load((run_dir / "config.yaml").read_text())
    for ckpt in (run_dir / "checkpoints").glob("*.ckpt"):
        assert torch.load(ckpt, weights_only=True)["state_dict"], ckpt


def test_lightning_still_broadcasts_inside_its_sigterm_handler() -> None:
    # Why ddp_teardown.StopTogether takes Lightning's SIGTERM handler over under DDP (Lightning-AI/pytorch-lightning
    # #20806, #20825): a collective inside a signal handler. When this fails, see whether StopTogether can go.
    from pytorch_lightning.trainer.connectors.signal_connector import _SignalConnector

    assert "dist.broadcast" in inspect.getsource(_SignalConnector._sigterm_notifier_fn)


@pytest.mark.e2e
def test_sigterm_to_the_torchrun_group_stops_every_rank_at_one_step(tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _endless(tiny_mnist, run)
    wait_for(run / "checkpoints" / "last.ckpt", proc)
    os.killpg(proc.pid, signal.SIGTERM)  # as a job scheduler does: torchrun and its workers
    code, err = _finish(proc, limit_s=60)
    assert code != 0  # torchrun's own exit when signalled (1); each rank exited 143
    assert err.count("error: stopped by SIGTERM") == 2, err[-3000:]  # both ranks, none hung in a collective
    assert "forcefully exiting via 9" not in err  # torchrun had to kill no rank
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "terminated" and metrics["resume_with"] == f"ckpt_path={run / 'checkpoints' / 'interrupted.ckpt'}"
    _intact(run)


def test_under_torchrun_the_trainer_must_match_its_processes(tiny_mnist: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"TORCHELASTIC_RUN_ID": "t", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2",
                       "LOCAL_WORLD_SIZE": "1", "GROUP_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    assert (launch.external_launcher(), launch.world_size(), launch.global_rank()) == ("torchrun", 2, 0)
    trainer = compose_train(tiny_mnist, "trainer=ddp_cpu").trainer
    assert (trainer.devices, trainer.num_nodes) == (1, 2)  # trainer=ddp_cpu takes torchrun's layout
    check_trainer_options(dict(trainer))
    # Set by hand against the launch, a layout is refused before anything runs (Lightning would not check it).
    with pytest.raises(ConfigError, match=r"^trainer.devices: torchrun started 2 process\(es\), 1 per node on 2 "
                                          r"node\(s\), but the trainer asks for 2 device\(s\) per node on 1 node"):
        check_trainer_options({**trainer, "devices": 2, "num_nodes": 1})
    with pytest.raises(ConfigError, match="hint: trainer.devices=1 trainer.num_nodes=2"):
        check_trainer_options({**trainer, "num_nodes": 1})


@pytest.mark.parametrize("command", ["summary", "export", "predict", "list"])
def test_a_one_process_command_under_torchrun_runs_on_rank_0_alone(command: str, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Each rank would do the whole job (predict: two processes writing one file, printing every row twice)."""
    from modelforge.__main__ import main

    for key, value in {"TORCHELASTIC_RUN_ID": "t", "RANK": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    assert main([command, "ckpt_path=RUN"]) == 0
    assert capsys.readouterr().err == f"`{command}` runs in one process: rank 1 leaves it to rank 0\n"
    monkeypatch.setenv("RANK", "0")  # rank 0 does the job
    assert main(["list", "activations"]) == 0
    out, err = capsys.readouterr()
    assert "leaves it to rank 0" not in err and "gelu" in out


class _Store:
    """What rank_zero_decides uses of torch's TCPStore; a missing key is a timeout."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.keys[key] = value.encode()

    def get(self, key: str) -> bytes:
        if key not in self.keys:
            raise RuntimeError("Wait timeout")
        return self.keys[key]


def test_rank_zero_claims_and_the_other_ranks_take_its_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _Store()
    monkeypatch.setattr(launch, "_connect", lambda: store)
    for key, value in {"TORCHELASTIC_RUN_ID": "t", "WORLD_SIZE": "2", "RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    run, other = tmp_path / "run", tmp_path / "other"

    def as_rank(rank: int) -> None:  # each rank's questions are counted from its start
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setattr(launch, "_asked", Counter())

    as_rank(0)
    claim_run_dir(run)
    with pytest.raises(ConfigError, match="is taken by another run") as refused:
        claim_run_dir(run)  # a second run into it
    claim_run_dir(other)
    as_rank(1)
    claim_run_dir(run)  # rank 0 claimed it: rank 1 trains there too, refused by nothing
    with pytest.raises(launch.LaunchError) as same:
        claim_run_dir(run)
    assert (str(same.value), same.value.exit_code) == (str(refused.value), 2)  # ends as rank 0 did
    with pytest.raises(ConfigError, match=f"rank 0 claimed {other}, but rank 1 was given {tmp_path / 'mine'}"):
        claim_run_dir(tmp_path / "mine")
    with pytest.raises(launch.LaunchError, match="rank 1 got no answer from rank 0 on 'run_dir_claim'"):
        claim_run_dir(tmp_path / "never")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "run"]  # rank 1 made nothing


def test_a_sweep_under_torchrun_is_refused_before_it_starts(run_main, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"TORCHELASTIC_RUN_ID": "t", "WORLD_SIZE": "2", "RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    result = run_main("train", "-m", "enc_sizes=[8],[16]", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 2
    assert result.stderr.startswith("error: -m: a sweep started by torchrun would run whole in each of its 2 processes")
    assert not (tmp_path / "sweep").exists()
