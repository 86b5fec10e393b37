"""Run options: loggers, channels_last, precision defaults, and run directories that never collide."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import torch

from modelforge.train import train
from modelforge.train.trainer import default_precision
from tests.helpers.run_config import compose_train, tiny_cli_args


def test_tensorboard_logger_writes_event_files(tiny_mnist: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    cfg = compose_train(tiny_mnist, "logger=tensorboard", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
                        "model=mlp", "model.hidden_sizes=[8]")
    train(cfg, run_dir=tmp_path)
    assert list((tmp_path / "logs").glob("events.out.tfevents.*"))


def test_channels_last_trains_to_the_same_numbers(tiny_mnist: Path, tmp_path: Path) -> None:
    common = ("model=cnn", "enc_sizes=[4]", "dec_sizes=[]", "trainer.max_epochs=1", "sched=none", "optim.lr=1e-3")
    train(compose_train(tiny_mnist, *common), run_dir=tmp_path / "a")
    train(compose_train(tiny_mnist, *common, "channels_last=true"), run_dir=tmp_path / "b")
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in "ab")
    assert b["test/loss"] == pytest.approx(a["test/loss"], rel=1e-3)


def test_precision_defaults_to_float32_without_a_gpu() -> None:
    expected = "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"
    assert default_precision("auto") == expected
    assert default_precision("cpu") == "32-true"


def test_two_launches_in_the_same_second_get_two_run_dirs(run_main, tiny_mnist: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Hydra's ${now:...} reads this clock: both launches get the very same date and time, for sure.
    import hydra.core.utils

    class SameSecond(datetime):
        @classmethod
        def now(cls, tz=None) -> datetime:
            return datetime(2026, 1, 2, 3, 4, 5)

    monkeypatch.setattr(hydra.core.utils, "datetime", SameSecond)
    for _ in range(2):
        result = run_main("train", "trainer.fast_dev_run=true", "model=mlp", "model.hidden_sizes=[8]",
                          *tiny_cli_args(tiny_mnist), cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
    runs = sorted(tmp_path.glob("outputs/train/2026-01-02/03-04-05_*/metrics.json"))
    assert len(runs) == 2, runs
    assert all(json.loads(r.read_text())["status"] == "finished" for r in runs)


def test_label_smoothing_reaches_the_loss(tiny_mnist: Path, tmp_path: Path) -> None:
    from modelforge.train.run import _prepare
    from modelforge.train.run_config import validate_run_config

    module, _, _ = _prepare(validate_run_config(compose_train(tiny_mnist, "label_smoothing=0.3")), tmp_path)
    logits, labels = torch.randn(8, 10), torch.randint(0, 10, (8,))
    expected = torch.nn.functional.cross_entropy(logits, labels, label_smoothing=0.3)
    assert torch.equal(module.loss(logits, labels), expected)


def test_seed_makes_runs_repeat_and_another_seed_differs(tiny_mnist: Path, tmp_path: Path) -> None:
    common = ("model=mlp", "model.hidden_sizes=[16]", "model.dropout=0.2", "trainer.max_epochs=1",
              "data.augment_shift=2")
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        train(compose_train(tiny_mnist, *common, f"seed={seed}"), run_dir=tmp_path / name)
    weights = {n: torch.load(tmp_path / n / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"] for n in "abc"}
    assert all(torch.equal(weights["a"][k], weights["b"][k]) for k in weights["a"])  # init, split, order, dropout, shifts
    assert not torch.equal(weights["a"]["model.head.weight"], weights["c"]["model.head.weight"])
    metrics = [json.loads((tmp_path / n / "metrics.json").read_text()) for n in "ab"]
    assert metrics[0]["test/loss"] == metrics[1]["test/loss"]


@pytest.mark.slow  # torch.compile (inductor) takes about 30 s on a CPU
def test_compile_trains_with_the_same_state_dict_keys(tiny_mnist: Path, tmp_path: Path) -> None:
    # No dropout: compiled code draws its random masks differently.
    common = ("model=mlp", "model.hidden_sizes=[16]", "model.dropout=0", "trainer.max_epochs=1", "sched=none")
    train(compose_train(tiny_mnist, *common), run_dir=tmp_path / "eager")
    train(compose_train(tiny_mnist, *common, "compile=true"), run_dir=tmp_path / "compiled")
    eager, compiled = (torch.load(tmp_path / d / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
                       for d in ("eager", "compiled"))
    assert eager.keys() == compiled.keys()  # nn.Module.compile: checkpoints load into an uncompiled model
    for key in eager:
        torch.testing.assert_close(compiled[key], eager[key], rtol=1e-3, atol=1e-4)


def test_cli_eval_uses_the_data_settings_the_model_was_trained_with(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    trained = run_main("train", "model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=1", "data.normalize=false",
                  *tiny_cli_args(tiny_mnist), f"hydra.run.dir={run}")
    assert trained.returncode == 0, trained.stderr[-2000:]
    # Neither data_dir nor normalize repeated: both come from the checkpoint's config.
    evaluated = run_main("eval", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "trainer.enable_progress_bar=false",
                    f"hydra.run.dir={tmp_path / 'eval'}")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    recorded = json.loads((run / "metrics.json").read_text())
    again = json.loads((tmp_path / "eval" / "eval_metrics.json").read_text())
    assert again["test/loss"] == pytest.approx(recorded["test/loss"], abs=1e-6)
    assert again["test/acc"] == pytest.approx(recorded["test/acc"], abs=1e-6)


@pytest.mark.parametrize("option, says", [
    # under the key Lightning's message names
    ("trainer.max_epochs=-5", "error: trainer.max_epochs: -5 refused by Lightning: `max_epochs` must be a "
                              "non-negative integer or -1. You passed in -5."),
    ("trainer.limit_train_batches=-2", "error: trainer.limit_train_batches: -2 refused by Lightning: You have passed "
                                       "invalid value -2 for limit_train_batches"),
])
def test_a_value_lightning_refuses_stops_before_the_run_directory_exists(option: str, says: str, run_main,
                                                                         tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = run_main("train", option, *tiny_cli_args(tiny_mnist), f"hydra.run.dir={run}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert says in result.stderr
    assert not run.exists()
