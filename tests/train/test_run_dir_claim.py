"""A run directory is claimed atomically: of two runs started together into one directory, exactly one gets it."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from modelforge.errors import ConfigError
from modelforge.train import train
from modelforge.train.context import RunContext
from modelforge.train.records import CLAIM_FILE, claim_run_dir
from tests.conftest import REPO
from tests.helpers.run_config import TINY, compose_train

# Imports what a run needs, says so in a file, waits for the start file, then is `python -m modelforge`:
# two such processes leave the starting line within a millisecond of each other.
WAIT_THEN_RUN = """
import os, runpy, sys, time
import modelforge.cli.app, modelforge.cli.commands, modelforge.train.run
ready, start = sys.argv.pop(1), sys.argv.pop(1)
open(ready, "w").close()
while not os.path.exists(start):
    time.sleep(0.001)
runpy.run_module("modelforge", run_name="__main__", alter_sys=True)
"""
QUICK = ("model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
         "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "sched=none")


def _start_together(run_dir: Path, lrs: tuple[str, ...], data: Path, tmp: Path) -> list[subprocess.Popen]:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "MODELFORGE_DATA": str(data)}
    env.pop("PYTEST_CURRENT_TEST", None)
    start = tmp / f"start_{run_dir.name}"
    procs, ready = [], []
    for i, lr in enumerate(lrs):
        ready.append(tmp / f"ready_{run_dir.name}_{i}")
        procs.append(subprocess.Popen(
            [sys.executable, "-c", WAIT_THEN_RUN, str(ready[-1]), str(start), "train", *TINY, *QUICK,
             f"optim.lr={lr}", f"hydra.run.dir={run_dir}"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a racer never got ready"
        time.sleep(0.01)
    start.touch()
    return procs


@pytest.mark.e2e
def test_two_runs_started_together_into_one_dir_one_runs_the_other_is_refused_in_one_line(tiny_mnist: Path,
                                                                                         tmp_path: Path) -> None:
    # One race (two process starts: ~10 s on 2 cores); before the claim, 4 of 4 such races went
    # wrong: both runs exited 0 into one directory, or one died in Lightning's CSV logger.
    run_dir, lrs = tmp_path / "D", ("0.001", "0.002")  # the learning rate tells whose files D holds
    procs = _start_together(run_dir, lrs, tiny_mnist, tmp_path)
    results = [(p.pid, *p.communicate(timeout=300), p.returncode) for p in procs]
    codes = sorted(r[3] for r in results)
    assert codes == [0, 2], [r[2][-2000:] for r in results]
    winner = next(i for i, r in enumerate(results) if r[3] == 0)
    (pid, _, _, _), (_, lost_out, lost_err, _) = results[winner], results[1 - winner]

    assert "Traceback" not in lost_err, lost_err
    assert lost_err.splitlines() == [lost_err.strip()], lost_err  # one line, naming D
    # On a loaded machine the loser can reach its check after the winner has finished: then D is
    # a finished run, refused as any finished run is (exit 2 all the same).
    assert lost_err.startswith((f"error: hydra.run.dir: {run_dir} is taken by another run",
                                f"error: hydra.run.dir: {run_dir} already holds a run")), lost_err
    assert "(pid" not in lost_err or f"(pid {pid} on " in lost_err  # none if read before the winner wrote it
    assert "run directory:" not in lost_out

    # Every file is the winner's: its claim, its config, its overrides, one set of checkpoints.
    assert json.loads((run_dir / CLAIM_FILE).read_text())["pid"] == pid
    lr = float(lrs[winner])
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["optim"]["lr"] == lr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished" and f"optim.lr={lrs[winner]}" in metrics["overrides"]
    assert f"optim.lr={lrs[winner]}" in yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best-epoch01.ckpt", "last.ckpt"]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["hyper_parameters"]["config"]["optim"]["lr"] == lr
    with open(run_dir / "logs" / "metrics.csv", newline="") as rows:
        assert any(row.get("test/acc") for row in csv.DictReader(rows))  # one writer: header and rows agree
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(
        [".hydra", CLAIM_FILE, "checkpoints", "config.yaml", "learning_curves.png", "logs", "metrics.json",
         "train.log"])


def test_of_many_claims_at_once_exactly_one_succeeds(tmp_path: Path) -> None:
    run_dir, barrier = tmp_path / "D", threading.Barrier(16)
    outcomes: list[str] = []

    def claim() -> None:
        barrier.wait()
        try:
            claim_run_dir(run_dir)
            outcomes.append("claimed")
        except ConfigError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("claimed") == 1, outcomes
    refused = [o for o in outcomes if o != "claimed"]
    assert all(o.startswith(f"run_dir: {run_dir} is taken by another run") and "\n" not in o for o in refused)
    assert json.loads((run_dir / CLAIM_FILE).read_text())["pid"] == os.getpid()


def test_a_directory_its_caller_claimed_is_trained_in_and_any_other_run_is_refused(tiny_mnist: Path,
                                                                                    tmp_path: Path) -> None:
    """The CLI claims before Hydra writes and says so (RunContext.claimed): train() claims no second time."""
    run_dir = tmp_path / "cli"
    claim_run_dir(run_dir, dir_key="hydra.run.dir")  # as the Hydra callback does
    cfg = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[8]", "trainer.fast_dev_run=true")
    train(cfg, run_dir=run_dir, context=RunContext(claimed=True))
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "finished"
    with pytest.raises(ConfigError, match="already holds a run"):
        claim_run_dir(run_dir)  # any later run is refused


def test_a_ddp_rank_claims_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    claim_run_dir(tmp_path)
    monkeypatch.setenv("LOCAL_RANK", "1")
    claim_run_dir(tmp_path)  # rank 1 writes into its rank 0's directory


def test_python_train_into_a_claimed_dir_is_refused_and_writes_nothing_there(tiny_mnist: Path,
                                                                              tmp_path: Path) -> None:
    claim_run_dir(tmp_path)  # another run, still setting up: it has written nothing else yet
    before = sorted(tmp_path.iterdir())
    with pytest.raises(ConfigError, match=f"^run_dir: {tmp_path} is taken by another run"):
        train(compose_train(tiny_mnist, "model=mlp", "trainer.fast_dev_run=true"), run_dir=tmp_path)
    with pytest.raises(ConfigError, match="optim.lr: must be positive"):  # its own error; no metrics.json
        train(compose_train(tiny_mnist, "optim.lr=-1"), run_dir=tmp_path)
    assert sorted(tmp_path.iterdir()) == before


def test_a_run_from_python_claims_its_dir_and_a_second_run_there_is_refused(tiny_mnist: Path, tmp_path: Path) -> None:
    cfg = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[8]", "trainer.fast_dev_run=true")
    train(cfg, run_dir=tmp_path / "run")
    assert json.loads((tmp_path / "run" / CLAIM_FILE).read_text())["command"] == "train"
    with pytest.raises(ConfigError, match="already holds a run"):
        train(cfg, run_dir=tmp_path / "run")
