"""Real signals sent to a real training subprocess: a resumable checkpoint, an honest status and exit code."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.run_config import tiny_cli_args
from tests.helpers.signals import signal_and_wait, start_train, wait_for

# Runs until signalled: a tiny model on tiny data, epochs without end.
ENDLESS = ("model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=100000", "sched=none")


@pytest.mark.e2e
@pytest.mark.parametrize(("signum", "status", "code"), [
    (signal.SIGTERM, "terminated", 143),
    pytest.param(signal.SIGINT, "interrupted", 130, marks=pytest.mark.slow),  # 10 s: the same path as SIGTERM's
])
def test_a_signal_saves_a_resumable_checkpoint_and_exits_128_plus_signal(
        signum: int, status: str, code: int, run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = start_train(*tiny_cli_args(tiny_mnist), *ENDLESS, f"hydra.run.dir={run}")
    wait_for(run / "checkpoints" / "last.ckpt", proc)  # an epoch has ended: training is under way
    rc, out, err = signal_and_wait(proc, signum)

    assert rc == code, err[-3000:]
    assert "Traceback" not in err
    assert "Received SIG" not in out + err  # Lightning's INFO notice is held back: the run says how it stopped
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == status
    assert metrics["error"].startswith(("Terminated: stopped by SIG", "Interrupted: stopped by Ctrl-C"))
    saved = run / "checkpoints" / "interrupted.ckpt"
    assert metrics["resume_with"] == f"ckpt_path={saved}"
    assert f"error: {metrics['error'].split(': ', 1)[1]}\n  hint: resume with ckpt_path={saved}" in err

    if signum != signal.SIGTERM:
        return  # the same checkpoint path; resuming it is shown once, for SIGTERM
    epoch = torch.load(saved, weights_only=True)["epoch"]
    resumed = run_main("train", *tiny_cli_args(tiny_mnist), *ENDLESS[:2], "sched=none",  # in process: quicker
                       f"trainer.max_epochs={epoch + 1}", f"ckpt_path={saved}", f"hydra.run.dir={tmp_path / 'resumed'}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert after["status"] == "finished" and after["epochs"] == epoch + 1


def test_sigusr1_mid_training_stops_as_sigterm_does_with_exit_138(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    # A real SIGUSR1 to this process once an epoch has ended; the run is in this process (its
    # handling is the same code as SIGTERM's, whose process exit status the test above checks).
    run = tmp_path / "run"
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)  # a late signal, after the run, is harmless

    def send_once_training() -> None:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "last.ckpt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)

    sender = threading.Thread(target=send_once_training, daemon=True)
    try:
        sender.start()
        result = run_main("train", *tiny_cli_args(tiny_mnist), *ENDLESS, f"hydra.run.dir={run}")
        sender.join(timeout=130)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert result.returncode == 138, result.stderr[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "terminated" and metrics["error"] == "Terminated: stopped by SIGUSR1"
    assert metrics["resume_with"] == f"ckpt_path={run / 'checkpoints' / 'interrupted.ckpt'}"
    assert (run / "checkpoints" / "interrupted.ckpt").is_file()


def test_sigterm_before_training_starts_still_says_terminated(tiny_mnist: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from modelforge.data import MNISTDataModule
    from modelforge.errors import Terminated
    from modelforge.train import train
    from tests.helpers.run_config import compose_train

    prepare = MNISTDataModule.prepare_data

    def slow_data(self):  # a real SIGTERM while the data files are being checked
        os.kill(os.getpid(), signal.SIGTERM)
        prepare(self)

    monkeypatch.setattr(MNISTDataModule, "prepare_data", slow_data)
    with pytest.raises(Terminated) as stopped:
        train(compose_train(tiny_mnist, "model=mlp"), run_dir=tmp_path)
    assert stopped.value.exit_code == 143
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "terminated" and "resume_with" not in metrics
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone after the run
