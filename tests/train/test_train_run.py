"""Training, evaluation and resuming with a real Lightning Trainer on tiny generated IDX files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from modelforge.errors import ConfigError, Interrupted
from modelforge.train import evaluate, train
from tests.helpers.run_config import compose_train


@pytest.fixture(scope="module")
def trained_run(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    cfg = compose_train(tiny_mnist, "model=cnn", "enc_sizes=[8,16]", "dec_sizes=[32]", "trainer.max_epochs=2",
                        "optim.lr=3e-3", "label_smoothing=0.1")  # eval must compute the loss the same way
    value = train(cfg, run_dir=run_dir)
    assert value == json.loads((run_dir / "metrics.json").read_text())["val/acc"]
    return run_dir


def test_fast_dev_run(tiny_mnist: Path, tmp_path: Path) -> None:
    cfg = compose_train(tiny_mnist, "trainer.fast_dev_run=true", "model=mlp", "model.hidden_sizes=[16]")
    train(cfg, run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["global_step"] == 1
    # fast_dev_run tests one batch of 32 (data.batch_size): the accuracy is a count out of 32, and
    # the recorded figures are the test pass's own (a one-step MLP is not yet right on every image)
    correct = metrics["test/acc"] * 32
    assert correct == round(correct) and metrics["test/acc"] < 1.0 and metrics["test/loss"] > 0.5


def test_metrics_json_holds_the_run(trained_run: Path) -> None:
    metrics = json.loads((trained_run / "metrics.json").read_text())
    for key in ("val/acc", "val/loss", "test/acc", "test/loss", "train_time_s", "params", "best_val/acc"):
        assert isinstance(metrics[key], (int, float)), key
    assert metrics["epochs"] == 2 and metrics["epochs_this_run"] == 2 and metrics["status"] == "finished"
    assert metrics["params"] == 8 * 9 + 8 + 16 + 16 * 8 * 9 + 16 + 32 + 16 * 7 * 7 * 32 + 32 + 32 * 10 + 10
    assert metrics["test/acc"] > 0.3  # learnable patterns: well above chance (0.1) after two epochs


def test_run_dir_layout(trained_run: Path) -> None:
    assert (trained_run / "checkpoints" / "last.ckpt").is_file()
    assert list((trained_run / "checkpoints").glob("best-epoch*.ckpt"))
    rows = list(csv.DictReader((trained_run / "logs" / "metrics.csv").read_text().splitlines(keepends=True)))
    assert {"train/loss_step", "val/acc", "test/acc"} <= set(rows[0])
    config = (trained_run / "config.yaml").read_text()
    assert "enc_sizes:\n  - 8\n  - 16" in config or "enc_sizes:\n- 8\n- 16" in config


def test_checkpoint_is_plain_and_loads_weights_only(trained_run: Path) -> None:
    ckpt = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=True)
    config = ckpt["hyper_parameters"]["config"]
    assert type(config) is dict and config["model"]["enc_sizes"] == [8, 16]


def test_eval_reproduces_the_test_metrics(trained_run: Path, tiny_mnist: Path, tmp_path: Path) -> None:
    cfg = compose_train(tiny_mnist)  # data + trainer groups, as `eval` composes them
    cfg.ckpt_path = str(trained_run / "checkpoints" / "last.ckpt")
    results = evaluate(cfg, run_dir=tmp_path)
    recorded = json.loads((trained_run / "metrics.json").read_text())
    assert results["test/acc"] == pytest.approx(recorded["test/acc"], abs=1e-6)
    assert results["test/loss"] == pytest.approx(recorded["test/loss"], rel=1e-5)
    # A second evaluate() into the same directory would replace its record: refused, the first left whole.
    first = (tmp_path / "eval_metrics.json").read_text()
    with pytest.raises(ConfigError, match=r"^run_dir: .* already holds a run \(eval_metrics.json\); it is left untouched: leave run_dir unset"):
        evaluate(cfg, run_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"already holds a run \(metrics.json, config.yaml"):
        evaluate(cfg, run_dir=trained_run)  # nor into the training run's own directory
    assert (tmp_path / "eval_metrics.json").read_text() == first


def test_accuracy_counts_every_image_whatever_the_batching(trained_run: Path, tiny_mnist: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Predicted labels reach the accuracy metric in groups of METRIC_UPDATE_EVERY batches and at
    the end of the epoch: 64 one-image batches make two updates, 13 batches of five make one."""
    from torchmetrics.classification import MulticlassAccuracy

    from modelforge.train.module import METRIC_UPDATE_EVERY

    assert METRIC_UPDATE_EVERY == 32  # the update sizes below follow from it
    update, sizes = MulticlassAccuracy.update, []

    def counted(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        sizes.append(len(target))
        update(self, preds, target)

    monkeypatch.setattr(MulticlassAccuracy, "update", counted)
    recorded = json.loads((trained_run / "metrics.json").read_text())["test/acc"]
    for batch_size, updates in ((1, [32, 32]), (5, [64]), (64, [64])):
        cfg = compose_train(tiny_mnist, f"data.batch_size={batch_size}")
        cfg.ckpt_path = str(trained_run / "checkpoints" / "last.ckpt")
        sizes.clear()
        accuracy = evaluate(cfg, run_dir=tmp_path / str(batch_size))["test/acc"]
        assert sizes == updates, batch_size
        assert accuracy == recorded and accuracy * 64 == round(accuracy * 64), batch_size


def test_resume_continues_from_the_next_epoch(trained_run: Path, tiny_mnist: Path, tmp_path: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in trained_run.rglob("*") if p.is_file()}
    cfg = compose_train(tiny_mnist, "model=cnn", "enc_sizes=[8,16]", "dec_sizes=[32]", "trainer.max_epochs=3",
                        "optim.lr=3e-3", f"ckpt_path={trained_run / 'checkpoints' / 'last.ckpt'}")
    train(cfg, run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["epochs"] == 3 and metrics["epochs_this_run"] == 1
    rows = list(csv.DictReader((tmp_path / "logs" / "metrics.csv").read_text().splitlines(keepends=True)))
    assert {row["epoch"] for row in rows if row["train/loss_epoch"] or row["val/acc"]} == {"2"}
    assert before == {p: p.stat().st_mtime_ns for p in trained_run.rglob("*") if p.is_file()}


def test_ctrl_c_mid_epoch_keeps_a_checkpoint_to_resume_from(tiny_mnist: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from modelforge.train.module import ClassifierModule

    step = ClassifierModule.training_step

    def interrupted_at_step_5(self, batch, batch_idx):  # 4 steps per epoch: the 2nd batch of epoch 2
        if self.global_step == 5:
            raise KeyboardInterrupt
        return step(self, batch, batch_idx)

    args = ("model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=2")
    monkeypatch.setattr(ClassifierModule, "training_step", interrupted_at_step_5)
    with pytest.raises(Interrupted):  # Lightning's graceful shutdown after Ctrl-C, reported as such (exit 130)
        train(compose_train(tiny_mnist, *args), run_dir=tmp_path / "first")
    monkeypatch.undo()

    saved = tmp_path / "first" / "checkpoints" / "interrupted.ckpt"
    metrics = json.loads((tmp_path / "first" / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and metrics["resume_with"] == f"ckpt_path={saved}"
    assert metrics["error"] == "Interrupted: stopped by Ctrl-C (SIGINT)"
    assert torch.load(saved, weights_only=True)["global_step"] == 5
    assert (tmp_path / "first" / "checkpoints" / "last.ckpt").is_file()  # the end of epoch 1 is kept too

    train(compose_train(tiny_mnist, *args, f"ckpt_path={saved}"), run_dir=tmp_path / "resumed")
    resumed = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert resumed["status"] == "finished" and resumed["global_step"] == 8 and resumed["epochs"] == 2


def test_a_resume_that_regroups_or_swaps_the_optimizer_is_refused_before_training(tiny_mnist: Path,
                                                                                   tmp_path: Path) -> None:
    """torch would fail mid-restore (other group sizes), put one parameter's moments on another (as many tensors,
    other ones) or read another optimizer's state: refused before fit, naming what changed."""
    args = ("model=cnn", "enc_sizes=[8,16]", "dec_sizes=[16]", "freeze=[encoder.0.*]")
    train(compose_train(tiny_mnist, *args, "trainer.max_epochs=1"), run_dir=tmp_path / "a")
    last = tmp_path / "a" / "checkpoints" / "last.ckpt"
    more = (*args[:3], "trainer.max_epochs=2", f"ckpt_path={last}")
    prefix = r"^ckpt_path: a resume continues the checkpoint's optimizer, whose parameter groups hold \[8\] tensors; "
    with pytest.raises(ConfigError, match=prefix + r"this config builds Adam with \[8\]: freeze=\['encoder.0.\*'\] "
                                                   r"then, \['encoder.1.\*'\] now\n") as refused:
        train(compose_train(tiny_mnist, *more, "freeze=[encoder.1.*]"), run_dir=tmp_path / "b")
    assert f"leave out ckpt_path and give init.from={last}" in str(refused.value)
    assert not (tmp_path / "b").exists()  # refused with the config, before the run directory: nothing made
    with pytest.raises(ConfigError, match=prefix + r"this config builds Adam with \[12\]: freeze=\['encoder.0.\*'\] "
                                                   r"then, unset now"):
        train(compose_train(tiny_mnist, *more), run_dir=tmp_path / "c")
    with pytest.raises(ConfigError, match=r"builds SGD with \[8\]: optimizer torch.optim.Adam then, SGD now"):
        train(compose_train(tiny_mnist, *more, args[3], "optim=sgd"), run_dir=tmp_path / "d")
    weights_only = {k: v for k, v in torch.load(last, weights_only=True).items() if k != "optimizer_states"}
    torch.save(weights_only, tmp_path / "weights_only.ckpt")
    with pytest.raises(ConfigError, match=r"weights_only.ckpt holds weights but no optimizer state: it cannot be "
                                          r"resumed\n  hint: start a new run from these weights"):
        train(compose_train(tiny_mnist, *more[:-1], args[3], f"ckpt_path={tmp_path / 'weights_only.ckpt'}"),
              run_dir=tmp_path / "e")
    # As the run had it (the class by another of its paths): resumes.
    train(compose_train(tiny_mnist, *more, args[3], "optim._target_=torch.optim.adam.Adam"), run_dir=tmp_path / "f")
    assert json.loads((tmp_path / "f" / "metrics.json").read_text())["epochs_this_run"] == 1


def test_resuming_a_finished_run_with_no_epoch_left_says_so(tiny_mnist: Path, tmp_path: Path) -> None:
    first = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=1")
    train(first, run_dir=tmp_path / "a")
    last = tmp_path / "a" / "checkpoints" / "last.ckpt"
    again = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=1", f"ckpt_path={last}")
    with pytest.raises(ConfigError, match=r"trainer.max_epochs: the checkpoint has trained 1 epochs, so "
                                          r"trainer.max_epochs=1 leaves nothing to train"):
        train(again, run_dir=tmp_path / "b")
    more = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=2", f"ckpt_path={last}")
    train(more, run_dir=tmp_path / "c")
    assert json.loads((tmp_path / "c" / "metrics.json").read_text())["epochs_this_run"] == 1
