"""cuda_graph=true: the captured training step computes what the eager step does, keeps the epoch's sums and the
first bad loss on the device, refuses what a graph cannot replay before any work, and on a CPU says so and trains
eagerly. The capture itself needs CUDA: ``CapturedStep(capture=False)`` runs the same step body through the same
buffers and device-side hyperparameters, and the last test captures for real where there is a GPU."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from modelforge.train.captured_step import CapturedStep, StepSpec
from tests.train.conftest import tiny_cli_args


def _pair(optimizer_cls: type, norm: bool = True, **options: float) -> tuple[nn.Module, nn.Module, list, list]:
    torch.manual_seed(0)
    # No bias before the norm layer: its gradient is ~0 plus rounding noise, which Adam scales up to +-lr.
    hidden = [nn.Linear(16, 32, bias=False), nn.BatchNorm1d(32)] if norm else [nn.Linear(16, 32)]
    eager = nn.Sequential(nn.Flatten(), *hidden, nn.ReLU(), nn.Linear(32, 10))
    captured = copy.deepcopy(eager)
    optimizers = [optimizer_cls(m.parameters(), lr=1e-2, **options) for m in (eager, captured)]
    # The lr moves at every step; the momentum stays (a captured step cannot read a moving one: refused below).
    schedules = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1e-2, total_steps=30, cycle_momentum=False)
                 for o in optimizers]
    return eager, captured, optimizers, schedules


@pytest.mark.parametrize("optimizer_cls, options", [(torch.optim.AdamW, {"weight_decay": 5e-4}),
                                                     (torch.optim.Adam, {}),
                                                     (torch.optim.SGD, {"momentum": 0.9})])
@pytest.mark.parametrize("clip", [None, ("norm", 0.5), ("value", 0.01)])
def test_the_step_body_trains_as_the_eager_step_does(optimizer_cls: type, options: dict, clip: tuple | None) -> None:
    eager, model, (opt_eager, opt), (sched_eager, sched) = _pair(optimizer_cls, **options)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    algorithm, value = clip or ("norm", None)
    step = CapturedStep(model, loss_fn, opt, StepSpec(clip_value=value, clip_algorithm=algorithm), capture=False)
    loss_sum, correct = 0.0, 0
    for _ in range(12):
        x, y = torch.randn(8, 16), torch.randint(0, 10, (8,))
        opt_eager.zero_grad()
        logits = eager(x)
        loss = loss_fn(logits, y)
        loss.backward()
        if clip == ("norm", 0.5):
            nn.utils.clip_grad_norm_(eager.parameters(), 0.5)
        elif clip:
            nn.utils.clip_grad_value_(eager.parameters(), 0.01)
        opt_eager.step()
        sched_eager.step()
        loss_sum, correct = loss_sum + float(loss.detach()) * 8, correct + int((logits.argmax(1) == y).sum())
        step.step(x, y)
        step.count(8)
        sched.step()  # the host schedule; the step copies its values into the device tensors it reads
    for p, q in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    for p, q in zip(eager.buffers(), model.buffers()):  # BatchNorm's running statistics
        torch.testing.assert_close(q, p)
    assert float(step.loss_sum) == pytest.approx(loss_sum, rel=1e-5) and int(step.correct) == correct
    assert step.seen == 96 and int(step.step_index) == 12 and step.bad(block=True) is None
    assert all(isinstance(g["lr"], float) for g in opt.param_groups)  # the schedule and LR monitor see floats


def test_the_first_bad_loss_is_kept_on_the_device_with_its_step() -> None:
    _, model, (_, opt), _ = _pair(torch.optim.AdamW, norm=False)
    step = CapturedStep(model, nn.CrossEntropyLoss(), opt, StepSpec(max_loss=50.0), first_step=100, capture=False)
    x, y = torch.randn(8, 16), torch.randint(0, 10, (8,))
    step.step(x, y)
    step.step(x * 1e6, y)  # step 101: a huge loss, above max_loss
    step.step(torch.full_like(x, float("nan")), y)  # later, NaN: the first bad one is kept
    bad_step, bad_loss = step.bad(block=True)
    assert bad_step == 101 and 50.0 < bad_loss < float("inf")
    step.start_epoch()
    assert float(step.loss_sum) == 0.0 and int(step.correct) == 0 and step.seen == 0


def test_a_batch_of_another_shape_is_refused_naming_drop_last() -> None:
    _, model, (_, opt), _ = _pair(torch.optim.AdamW)
    step = CapturedStep(model, nn.CrossEntropyLoss(), opt, StepSpec(), capture=False)
    step.step(torch.randn(8, 16), torch.randint(0, 10, (8,)))
    with pytest.raises(ValueError, match=r"a training batch of shape \[5, 16\], the graph's is \[8, 16\].*drop_last"):
        step.step(torch.randn(5, 16), torch.randint(0, 10, (5,)))


@pytest.mark.parametrize("overrides, says", [
    (["hooks=[verbose]"], "error: cuda_graph: hook plugin 'verbose' runs Python at every step"),
    (["compile=true"], "error: cuda_graph: cannot be combined with compile=true"),
    (["trainer.precision=16-mixed"], "error: cuda_graph: float16 loss scaling checks for inf on the host"),
    (["trainer.accumulate_grad_batches=2"], "error: cuda_graph: trainer.accumulate_grad_batches=2"),
    (["optim=sgd"], "error: cuda_graph: one-cycle moves SGD's momentum at every step"),
    (["optim=adamw"], "error: cuda_graph: one-cycle moves AdamW's beta1 at every step, and a replayed step keeps the "
                      "value it was captured with"),
    (["optim._target_=torch.optim.RMSprop"], "error: cuda_graph: RMSprop cannot step inside a CUDA graph"),
])
def test_what_a_graph_cannot_replay_is_refused_before_the_run(run_main, tiny_mnist: Path, tmp_path: Path,
                                                              overrides: list[str], says: str) -> None:
    result = run_main("train", "cuda_graph=true", *overrides, *tiny_cli_args(tiny_mnist),
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_on_a_cpu_the_run_says_so_trains_eagerly_and_leaves_out_the_ragged_batch(run_main, tiny_mnist: Path,
                                                                                 tmp_path: Path) -> None:
    # 128 training images in batches of 48: two full batches each epoch, the ragged 32 left out.
    result = run_main("train", "cuda_graph=true", "model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=2",
                      "optim=sgd", "sched=cosine", *tiny_cli_args(tiny_mnist), "data.batch_size=48",
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-2000:]
    run = tmp_path / "run"
    assert "cuda_graph=true: this run trains on cpu, not a CUDA GPU: its steps run eagerly" in (run / "train.log").read_text()
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["drop_last"] is True
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["global_step"] == 4  # 2 epochs x 2 full batches


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_captured_run_trains_as_the_eager_run(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    common = ("model=mlp", "model.hidden_sizes=[32]", "model.dropout=0.0", "trainer.max_epochs=2",
              "trainer.accelerator=gpu", "trainer.precision=32-true", "data.batch_size=16", "data.drop_last=true",
              "sched.cycle_momentum=false")
    for name, extra in (("eager", []), ("captured", ["cuda_graph=true"])):
        result = run_main("train", *common, *extra, *tiny_cli_args(tiny_mnist), "trainer.accelerator=gpu",
                          f"hydra.run.dir={tmp_path / name}")
        assert result.returncode == 0, result.stderr[-2000:]
    eager, captured = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("eager", "captured"))
    assert captured["global_step"] == eager["global_step"] == 16
    assert captured["test/acc"] == pytest.approx(eager["test/acc"], abs=0.05)
    assert captured["test/loss"] == pytest.approx(eager["test/loss"], rel=0.05)
    assert "captured in a CUDA graph" in (tmp_path / "captured" / "train.log").read_text()


def test_the_speedrun_recipe_is_the_fast_recipe_at_batch_128_with_the_step_captured() -> None:
    from hydra import compose, initialize_config_dir

    from modelforge.config import conf_dir

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg, fast = (compose("train", overrides=[f"experiment={name}"]) for name in ("speedrun", "fast"))
    assert cfg.cuda_graph is True and cfg.data.batch_size == 128 and cfg.optim.lr == 2e-2
    assert cfg.trainer.max_epochs == 1 and cfg.trainer.num_sanity_val_steps == 0
    assert (cfg.model, cfg.label_smoothing, cfg.optim.weight_decay) == (fast.model, fast.label_smoothing,
                                                                         fast.optim.weight_decay)
    # the same one-cycle schedule, except that it leaves the momentum alone (a replay keeps the captured beta1)
    assert cfg.sched.cycle_momentum is False and {**cfg.sched, "cycle_momentum": None} == {**fast.sched}


def test_the_step_body_through_lightning_trains_as_the_eager_run(tiny_mnist: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything cuda_graph does on a GPU but the capture: the module's step hooks return None to Lightning, the
    body steps the optimizer and clips, the epoch's loss and accuracy come from the device-side sums, and the
    schedule's lr reaches the body each step. Same weights and figures as Lightning's own eager step."""
    from modelforge.train import module, train
    from tests.train.conftest import compose_train

    common = ("model=mlp", "model.hidden_sizes=[32]", "model.dropout=0.0", "trainer.max_epochs=2", "optim=adamw",
              "sched.cycle_momentum=false", "trainer.gradient_clip_val=0.5", "data.batch_size=48",
              "data.drop_last=true")
    train(compose_train(tiny_mnist, *common), run_dir=tmp_path / "eager")
    monkeypatch.setattr(module, "STEP_BODY_WITHOUT_CUDA", True)
    train(compose_train(tiny_mnist, *common, "cuda_graph=true"), run_dir=tmp_path / "body")
    eager, body = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("eager", "body"))
    assert "then is captured in a CUDA graph" in (tmp_path / "body" / "train.log").read_text()  # the body ran
    assert body["global_step"] == eager["global_step"] == 4  # 2 epochs x 2 full batches of 48 (the ragged 32 left out)
    for key in ("val/loss", "val/acc", "test/loss", "test/acc"):
        assert body[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6), key
    # each epoch's training loss and accuracy, logged from the body's device-side sums
    epochs = [[value for row in csv.DictReader((tmp_path / run / "logs" / "metrics.csv").open()) if row["train/acc"]
               for value in (float(row["train/loss_epoch"]), float(row["train/acc"]))] for run in ("eager", "body")]
    assert len(epochs[0]) == 4 and epochs[1] == pytest.approx(epochs[0], rel=1e-5)
    weights = [torch.load(tmp_path / run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
               for run in ("eager", "body")]
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, rtol=1e-4, atol=1e-6)
