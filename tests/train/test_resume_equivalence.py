"""Resume equals never stopping: the same weights, bit for bit, and the same metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from modelforge.errors import ConfigError
from modelforge.report.progress import LineProgress
from modelforge.train import train
from tests.helpers.resume import last_checkpoint as _last
from tests.helpers.resume import stopped_by_sigterm_at as _stopped_by_sigterm_at
from tests.helpers.run_config import compose_train

SAME = ("seed=3", "trainer.deterministic=true", "model=cnn", "enc_sizes=[4]", "dec_sizes=[16]", "model.dropout=0.2")
COMPARED = ("val/acc", "val/loss", "test/acc", "test/loss", "global_step", "epochs")


def assert_same_run(a: Path, b: Path) -> None:
    sa, sb = _last(a)["state_dict"], _last(b)["state_dict"]
    assert sa.keys() == sb.keys()
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not different, f"weights differ: {different}"
    ma, mb = (json.loads((run / "metrics.json").read_text()) for run in (a, b))
    assert {k: ma[k] for k in COMPARED} == {k: mb[k] for k in COMPARED}
    # last.ckpt is the final state even when val/acc stopped improving (Lightning's save_last lags then)
    assert _last(a)["global_step"] == ma["global_step"] and _last(b)["global_step"] == mb["global_step"]


# onecycle over a fixed 2 epochs (sched.epochs): the 1-epoch run takes the first half of the
# 2-epoch schedule. Without it, that run plans (and anneals) over its own 1 epoch: see the README.
@pytest.mark.parametrize("sched", [("sched=none",), ("sched=onecycle", "sched.epochs=2")], ids=["none", "onecycle"])
def test_one_epoch_then_resume_equals_two_epochs_in_one_go(sched: tuple[str, ...], tiny_mnist: Path,
                                                           tmp_path: Path) -> None:
    args = (*SAME, *sched)
    train(compose_train(tiny_mnist, *args, "trainer.max_epochs=2"), run_dir=tmp_path / "one_go")
    train(compose_train(tiny_mnist, *args, "trainer.max_epochs=1"), run_dir=tmp_path / "first")
    ckpt = tmp_path / "first" / "checkpoints" / "last.ckpt"
    train(compose_train(tiny_mnist, *args, "trainer.max_epochs=2", f"ckpt_path={ckpt}"), run_dir=tmp_path / "resumed")
    assert_same_run(tmp_path / "one_go", tmp_path / "resumed")


@pytest.mark.parametrize("sched", ["onecycle", "none"])
def test_resume_after_sigterm_mid_epoch_equals_never_stopping(sched: str, tiny_mnist: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    args = (*SAME, f"sched={sched}", "trainer.max_epochs=2")
    train(compose_train(tiny_mnist, *args), run_dir=tmp_path / "one_go")

    ckpt = _stopped_by_sigterm_at(6, compose_train(tiny_mnist, *args), tmp_path / "first", monkeypatch)
    assert torch.load(ckpt, weights_only=True)["global_step"] == 6  # 4 batches an epoch: mid-epoch 2
    with caplog.at_level("INFO", logger="modelforge.train.checkpoints"):
        train(compose_train(tiny_mnist, *args, f"ckpt_path={ckpt}"), run_dir=tmp_path / "resumed")
    assert_same_run(tmp_path / "one_go", tmp_path / "resumed")
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resuming from")]
    batch = compose_train(tiny_mnist, *args).data.batch_size
    assert said == [f"resuming from {ckpt}: 1 epoch done, global step 6, {2 * batch} samples into epoch 2"]


def test_sched_epochs_plans_the_schedule_over_that_many_epochs(tiny_mnist: Path, tmp_path: Path) -> None:
    train(compose_train(tiny_mnist, *SAME, "sched=onecycle", "sched.epochs=3", "trainer.max_epochs=1"),
          run_dir=tmp_path / "run")
    scheduler = _last(tmp_path / "run")["lr_schedulers"][0]
    assert scheduler["total_steps"] == 3 * 4 and scheduler["last_epoch"] == 4  # 4 batches an epoch


def test_sched_epochs_is_refused_where_no_schedule_is_planned(tiny_mnist: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sched\.epochs.*StepLR is not planned"):
        train(compose_train(tiny_mnist, *SAME, "sched=step", "+sched.epochs=2"), run_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match=r"sched\.epochs: got 0"):
        train(compose_train(tiny_mnist, *SAME, "sched=onecycle", "sched.epochs=0"), run_dir=tmp_path / "run2")
    assert not (tmp_path / "run").exists() and not (tmp_path / "run2").exists()


def test_a_mid_epoch_resume_prints_progress_lines(tiny_mnist: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Piped output (LineProgress): Lightning skips on_train_epoch_start when it resumes mid-epoch."""
    args = (*SAME, "trainer.max_epochs=2", "trainer.enable_progress_bar=true")  # not a terminal: progress lines
    ckpt = _stopped_by_sigterm_at(6, compose_train(tiny_mnist, *args), tmp_path / "first", monkeypatch)
    monkeypatch.setattr(LineProgress, "MIN_STEPS", 1)  # 4-step epochs: a line a step, to see the resumed epoch's
    with caplog.at_level("INFO", logger="modelforge.report.progress"):
        train(compose_train(tiny_mnist, *args, f"ckpt_path={ckpt}"), run_dir=tmp_path / "resumed")
    lines = [r.getMessage() for r in caplog.records if r.name == "modelforge.report.progress"]
    assert any(line.startswith("epoch 2/2  step 3/4") for line in lines), lines  # the resumed epoch's next step
    assert any(line.startswith("epoch 2/2 done in ") for line in lines), lines
    assert json.loads((tmp_path / "resumed" / "metrics.json").read_text())["global_step"] == 8
