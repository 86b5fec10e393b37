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
from tests.helpers.run_config import tiny_cli_args


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
    # Lightning's SWA swaps in new batch-norm buffers and skips the step of its batch-norm pass: not replayable
    (["callbacks=[swa]", "sched.cycle_momentum=false"],
     "error: cuda_graph: callbacks.swa (stochastic weight averaging) puts new tensors in place of batch norm's"),
    # several devices, in each form Lightning takes; refused before Lightning's own check (-1 on a CPU: TypeError)
    (["trainer.devices=2", "sched.cycle_momentum=false"], "error: cuda_graph: trainer.devices=2 asks for 2 devices"),
    (["trainer.devices=-1", "sched.cycle_momentum=false"], "error: cuda_graph: trainer.devices=-1 asks for every device"),
    (["trainer.devices='0,1'", "sched.cycle_momentum=false"], "error: cuda_graph: trainer.devices=0,1 asks for 2 devices"),
    (["trainer.devices=[0,1]", "sched.cycle_momentum=false"],
     "error: cuda_graph: trainer.devices=[0, 1] asks for 2 devices"),
    # CyclicLR cycles the momentum (here Adam's beta1) by default, as one-cycle does
    (["sched=none", "+sched._target_=torch.optim.lr_scheduler.CyclicLR", "+sched.base_lr=1e-4", "+sched.max_lr=1e-3"],
     "error: cuda_graph: CyclicLR moves Adam's beta1 at every epoch"),
    (["optim=sgd", "sched=none", "+sched._target_=torch.optim.lr_scheduler.CyclicLR", "+sched.base_lr=1e-4",
      "+sched.max_lr=1e-3", "+sched.interval=step"], "error: cuda_graph: CyclicLR moves SGD's momentum at every step"),
    # the ragged last batch is left out: a batch larger than the 128 training images would train 0 steps
    (["data.batch_size=256", "sched.cycle_momentum=false"],
     "error: data.batch_size: 256 is more than the 128 training images, and cuda_graph=true leaves out the ragged"),
])
def test_what_a_graph_cannot_replay_is_refused_before_the_run(run_main, tiny_mnist: Path, tmp_path: Path,
                                                              overrides: list[str], says: str) -> None:
    result = run_main("train", "cuda_graph=true", *tiny_cli_args(tiny_mnist), *overrides,
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr, result.stderr
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
    """Up to rounding (capturable Adam's tensor lr against the eager float one): tolerances that a frozen lr, a lost
    step or zeroed gradients exceed by orders of magnitude; one test image of 64 at most."""
    common = ("model=mlp", "model.hidden_sizes=[32]", "model.dropout=0.0", "trainer.max_epochs=2",
              "trainer.accelerator=gpu", "trainer.precision=32-true", "data.batch_size=16", "data.drop_last=true",
              "sched.cycle_momentum=false")
    for name, extra in (("eager", []), ("captured", ["cuda_graph=true"])):
        result = run_main("train", *common, *extra, *tiny_cli_args(tiny_mnist), "trainer.accelerator=gpu",
                          f"hydra.run.dir={tmp_path / name}")
        assert result.returncode == 0, result.stderr[-2000:]
    eager, captured = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("eager", "captured"))
    assert captured["global_step"] == eager["global_step"] == 16
    assert captured["test/acc"] == pytest.approx(eager["test/acc"], abs=1 / 64 + 1e-9)
    assert captured["test/loss"] == pytest.approx(eager["test/loss"], rel=1e-3)
    weights = [torch.load(tmp_path / n / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
               for n in ("eager", "captured")]
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, rtol=1e-3, atol=1e-4)
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


# Lightning's own step clips as torch does: clip_grad_norm_, clip_grad_value_ (trainer.gradient_clip_algorithm is
# Lightning's GradClipAlgorithmType, whose str() is 'GradClipAlgorithmType.VALUE'), and a value of 0 clips nothing.
@pytest.mark.parametrize("clip", [("norm", "0.5"), ("value", "0.01"), ("norm", "0")], ids=["norm", "value", "zero"])
def test_the_step_body_through_lightning_trains_as_the_eager_run(tiny_mnist: Path, tmp_path: Path, clip: tuple,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything cuda_graph does on a GPU but the capture: the module's step hooks return None to Lightning, the
    body steps the optimizer and clips, the epoch's loss and accuracy come from the device-side sums, and the
    schedule's lr reaches the body each step. Same weights and figures as Lightning's own eager step."""
    from modelforge.train import module, train
    from tests.helpers.run_config import compose_train

    common = ("model=mlp", "model.hidden_sizes=[32]", "model.dropout=0.0", "trainer.max_epochs=2", "optim=adamw",
              "sched.cycle_momentum=false", f"trainer.gradient_clip_algorithm={clip[0]}",
              f"trainer.gradient_clip_val={clip[1]}", "data.batch_size=48", "data.drop_last=true")
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


def test_the_step_spec_follows_lightnings_clipping_rule() -> None:
    """From a real Trainer: its GradClipAlgorithmType compared by value, and no clipping at 0 or None (Lightning's
    precision plugin clips only above 0)."""
    import pytorch_lightning as pl

    def spec(**options: object) -> StepSpec:
        return StepSpec.of_trainer(pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                              enable_model_summary=False, accelerator="cpu", **options))

    assert (spec(gradient_clip_val=0.5, gradient_clip_algorithm="value").clip_algorithm, spec(
        gradient_clip_val=0.5, gradient_clip_algorithm="value").clip_value) == ("value", 0.5)
    assert spec(gradient_clip_val=0.5).clip_algorithm == "norm"
    assert spec(gradient_clip_val=0).clip_value is None and spec().clip_value is None


def test_the_step_body_clips_by_value_as_clip_grad_value_does() -> None:
    """The body with clip_algorithm=value against a plain torch step with clip_grad_value_, and against norm
    clipping at the same threshold (which gives other weights: the comparison can tell them apart)."""
    results = {}
    for algorithm in ("value", "norm"):
        eager, model, (opt_eager, opt), _ = _pair(torch.optim.AdamW, norm=False)
        step = CapturedStep(model, nn.CrossEntropyLoss(), opt, StepSpec(clip_value=0.01, clip_algorithm=algorithm),
                            capture=False)
        for _ in range(5):
            x, y = torch.randn(8, 16), torch.randint(0, 10, (8,))
            opt_eager.zero_grad()
            nn.CrossEntropyLoss()(eager(x), y).backward()
            nn.utils.clip_grad_value_(eager.parameters(), 0.01)
            opt_eager.step()
            step.step(x, y)
        results[algorithm] = [torch.allclose(p, q, rtol=1e-5, atol=1e-6)
                              for p, q in zip(eager.parameters(), model.parameters())]
    assert all(results["value"]) and not all(results["norm"])


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
def test_the_optimizer_step_count_is_the_global_step_after_a_save_and_a_resume(tiny_mnist: Path, tmp_path: Path,
                                                                              device: str,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint holds a copy of Adam's step counts, moved to the CPU, and the optimizer keeps its own: the graph
    goes on incrementing the counts the optimizer reads, so every save and the resumed run count every step (torch's
    state_dict hands out the optimizer's own per-parameter dicts: replacing the count there froze it on a GPU)."""
    import pytorch_lightning as pl

    from modelforge.train import module, train
    from tests.helpers.run_config import compose_train

    class KeepSaved(pl.Callback):
        """The checkpoint dicts as Lightning saved them, with the step each was saved at."""

        def __init__(self) -> None:
            self.saved: list[tuple[int, dict]] = []

        def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
            self.saved.append((trainer.global_step, checkpoint))

    if device == "cpu":
        monkeypatch.setattr(module, "STEP_BODY_WITHOUT_CUDA", True)
    batch = 48 if device == "cpu" else 16  # on a GPU: 8 steps an epoch, past the 3 of warm-up and the capture
    common = ("model=mlp", "model.hidden_sizes=[16]", "optim=adamw", "sched.cycle_momentum=false", "cuda_graph=true",
              f"trainer.accelerator={device}", f"data.batch_size={batch}")
    kept = KeepSaved()
    train(compose_train(tiny_mnist, *common, "trainer.max_epochs=2"), run_dir=tmp_path / "run", callbacks=[kept])
    assert len(kept.saved) >= 2
    for step, checkpoint in kept.saved:  # each as it was at its save, not as the optimizer counts now
        counts = [float(s["step"]) for s in checkpoint["optimizer_states"][0]["state"].values()]
        assert counts and set(counts) == {float(step)}, (step, counts)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    for run, epochs in (("run", 2), ("resumed", 3)):
        if run == "resumed":
            train(compose_train(tiny_mnist, *common, "trainer.max_epochs=3", f"ckpt_path={last}"),
                  run_dir=tmp_path / run)
        metrics = json.loads((tmp_path / run / "metrics.json").read_text())
        saved = torch.load(tmp_path / run / "checkpoints" / "last.ckpt", weights_only=True)
        counts = {float(s["step"]) for s in saved["optimizer_states"][0]["state"].values()}
        assert metrics["global_step"] == epochs * (128 // batch) and counts == {float(metrics["global_step"])}
        assert saved["optimizer_states"][0]["param_groups"][0]["capturable"] is False  # as the optimizer was built


def test_devices_auto_is_refused_where_it_would_pick_several_gpus() -> None:
    """``devices=auto`` counts the GPUs Lightning would pick (``CUDAAccelerator.auto_device_count()`` on a GPU host,
    one elsewhere); the other forms say how many they ask for."""
    from modelforge.train.cuda_graph_checks import several_devices

    assert several_devices("auto", 2) == "every GPU of this machine (2)" and several_devices("auto", 1) is None
    assert [several_devices(d, 1) for d in (1, "1", [0], "0,", 2, "2", -1, "-1", "0,1", [0, 1])] == [
        None, None, None, None, "2 devices", "2 devices", "every device", "every device", "2 devices", "2 devices"]
