"""What a run prints: quiet by default, progress in a terminal and in a file, the same record from Python."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml

from modelforge import build_model
from modelforge.data import MNISTDataModule
from modelforge.errors import Interrupted
from modelforge.report.progress import LineProgress, progress_bar
from modelforge.train import train
from modelforge.train.module import ClassifierModule
from tests.helpers.mnist_idx import write_mnist_idx
from tests.helpers.run_config import compose_train

NOISE = ("Tip", "litlogger", "deprecated", "Total FLOPs: 0", "GPU available")
PROGRESS = re.compile(r"epoch 1/1  step (\d+)/28  loss [0-9.]+  [0-9.]+ it/s \([0-9,]+ samples/s\)  eta \d+:\d\d")


@pytest.fixture(scope="module")
def mnist_480(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """480 train images: with 32 for validation and batch 16, 28 steps per epoch."""
    folder = tmp_path_factory.mktemp("mnist_480")
    write_mnist_idx(folder, n_train=480, n_test=32)
    return folder


def _args(data: Path, run_dir: Path) -> list[str]:
    return [f"data.data_dir={data}", "data.verify=false", "data.download=false", "data.val_size=32",
            "data.batch_size=16", "trainer.accelerator=cpu", "trainer.max_epochs=1", f"hydra.run.dir={run_dir}"]


@pytest.mark.e2e
def test_piped_train_is_quiet_and_shows_progress_as_it_goes(cli, mnist_480: Path, tmp_path: Path) -> None:
    result = cli("train", "model=mlp", "model.hidden_sizes=[16]", *_args(mnist_480, tmp_path / "run"))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    for word in NOISE:
        assert word not in out
    assert re.search(r"model mlp \(MLP\): 12,730 params, 12.70 K MACs per sample", out)  # 784*16 + 16*10 multiply-accumulates
    before_metrics = out[: out.index("test/acc")]
    steps = [int(m.group(1)) for m in PROGRESS.finditer(before_metrics)]
    assert len(steps) >= 5 and steps == sorted(steps) and steps[-1] < 28
    assert "epoch 1/1 done in" in before_metrics and "val/acc" in before_metrics
    log = (tmp_path / "run" / "train.log").read_text()  # the log file shows the same progress
    assert len(PROGRESS.findall(log)) == len(steps) and "Tip" not in log


def test_verbose_brings_back_lightning_detail_with_true_figures(run_main, mnist_480: Path, tmp_path: Path) -> None:
    result = run_main("train", "model=mlp", "model.hidden_sizes=[16]", "hydra.verbose=true",
                 "trainer.limit_train_batches=2", *_args(mnist_480, tmp_path / "run"))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "GPU available" in out and "Total params" in out  # Lightning's banner and summary table
    assert "Total FLOPs: 0" not in out  # its summary has an example input: FLOPs are counted


def test_progress_is_a_bar_in_a_terminal_and_lines_elsewhere() -> None:
    pytest.importorskip("rich")  # without it, lines in a terminal too
    from modelforge.report.progress import RichBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress_bar(io.StringIO()), LineProgress)
    assert isinstance(progress_bar(Terminal()), RichBar)


def test_terminal_bar_fits_80_columns(tiny_mnist: Path) -> None:
    pytest.importorskip("rich")
    from modelforge.report.progress import RichBar

    screen = io.StringIO()
    bar = RichBar(console_kwargs={"force_terminal": True, "width": 80, "file": screen}, leave=True)
    module = ClassifierModule(build_model({"name": "mlp", "hidden_sizes": [16]}, seed=0),
                              config={"optim": {"_target_": "torch.optim.Adam", "lr": 1e-3}, "sched": None})
    data = MNISTDataModule(data_dir=tiny_mnist, verify=False, download=False, val_size=32, batch_size=16)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, callbacks=[bar])
    trainer.fit(module, datamodule=data)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    lines = [line.rstrip() for chunk in text.split("\n") for line in chunk.split("\r") if line.strip()]
    bars = [line for line in lines if line.startswith("Epoch 2/2")]  # the run's numbering, from 1 (Lightning's: 1/1)
    assert bars and all(len(line) <= 80 for line in lines)
    assert all(re.search(r"8/8 .* loss: \d\.\d{3}$", line) for line in bars[-1:])  # the metric on the bar's line
    assert not [line for line in lines if line.lstrip().startswith(("loss", "val/"))]  # nothing wrapped


@pytest.mark.parametrize("bar", ["modelforge's", "Lightning's"])
def test_only_a_bar_that_reads_logged_values_gets_the_step_loss_for_its_bar(bar: str, tiny_mnist: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning turns every prog_bar value it holds into a float after every batch (on a GPU, a
    host sync per step); modelforge's bar reads the module's last_step_loss when it draws instead."""
    pytest.importorskip("rich")
    from pytorch_lightning.callbacks import TQDMProgressBar
    from pytorch_lightning.trainer.connectors.logger_connector import result

    from modelforge.report.progress import RichBar

    converted = []
    convert = result.convert_tensors_to_scalars
    monkeypatch.setattr(result, "convert_tensors_to_scalars", lambda value: converted.append(value) or convert(value))
    callback = RichBar(console_kwargs={"file": io.StringIO()}) if bar == "modelforge's" else TQDMProgressBar()
    module = ClassifierModule(build_model({"name": "mlp", "hidden_sizes": [16]}, seed=0),
                              config={"optim": {"_target_": "torch.optim.Adam", "lr": 1e-3}, "sched": None})
    data = MNISTDataModule(data_dir=tiny_mnist, verify=False, download=False, val_size=32, batch_size=4)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, limit_val_batches=0, callbacks=[callback])
    trainer.fit(module, datamodule=data)  # 128 training images: 32 steps
    if bar == "modelforge's":
        assert len(converted) == 4  # the epoch's loss and accuracy, twice at its end: none per step
        assert "train/loss_step" not in trainer.progress_bar_metrics
        assert callback.get_metrics(trainer, module) == {"loss": float(module.last_step_loss)}
    else:
        assert len(converted) >= 31  # the step loss, after every batch from the first on
        assert isinstance(trainer.progress_bar_metrics["train/loss_step"], float)  # logged every 0.5 s


def test_python_runs_leave_the_cli_record_and_run_twice(tiny_mnist: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=1",
                        "trainer.enable_progress_bar=true")  # not a terminal here: progress lines
    train(cfg)
    train(cfg)  # the README snippet, run twice: a new directory each time
    runs = sorted((tmp_path / "outputs" / "train").glob("*/*"))
    assert len(runs) == 2
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["status"] == "finished" and metrics["launched_from"] == "python"
        assert metrics["run_dir"] == str(run) and Path(metrics["run_dir"]).is_absolute()
        assert Path(metrics["config"]) == run / "config.yaml" and (run / "config.yaml").is_file()
        assert metrics["best_ckpt"].startswith(str(run / "checkpoints"))
        log = (run / "train.log").read_text()
        assert "model mlp (MLP): 12,730 params" in log and "epoch 1/1 done in" in log and "Tip" not in log


def test_resume_with_fewer_batches_replans_the_schedule(tiny_mnist: Path, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    args = ("model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=1")  # 4 steps
    train(compose_train(tiny_mnist, *args), run_dir=tmp_path / "first")
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    with caplog.at_level("INFO", logger="modelforge.train.module"):
        train(compose_train(tiny_mnist, *args, "trainer.max_epochs=3", "trainer.limit_train_batches=1",
                            f"ckpt_path={last}"), run_dir=tmp_path / "resumed")
    metrics = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["global_step"] == 4 + 2 * 1
    assert "resuming at step 4 of a schedule planned for 4 steps; this run ends at step 6" in caplog.text
    assert not (tmp_path / "resumed" / "checkpoints" / "interrupted.ckpt").exists()


def test_resume_mid_epoch_past_a_shorter_epochs_end_plans_the_step_lightning_still_runs(
        tiny_mnist: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Stopped after 3 of epoch 2's 4 batches, resumed with 2 batches an epoch: Lightning runs one more batch of
    that epoch before it ends it. Planned without it, one-cycle was stepped past its end (a ValueError from torch)."""
    step = ClassifierModule.training_step

    def interrupted_at_step_7(self, batch, batch_idx):  # 4 steps an epoch: the 4th batch of epoch 2
        if self.global_step == 7:
            raise KeyboardInterrupt
        return step(self, batch, batch_idx)

    args = ("model=mlp", "model.hidden_sizes=[16]")
    monkeypatch.setattr(ClassifierModule, "training_step", interrupted_at_step_7)
    with pytest.raises(Interrupted):
        train(compose_train(tiny_mnist, *args, "trainer.max_epochs=2"), run_dir=tmp_path / "first")
    monkeypatch.undo()
    saved = tmp_path / "first" / "checkpoints" / "interrupted.ckpt"
    with caplog.at_level("INFO", logger="modelforge.train.module"):
        train(compose_train(tiny_mnist, *args, "trainer.max_epochs=3", "trainer.limit_train_batches=2",
                            f"ckpt_path={saved}"), run_dir=tmp_path / "resumed")
    assert "this run ends at step 10" in caplog.text  # 7 + 1 + one more epoch of 2
    resumed = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert resumed["status"] == "finished" and resumed["global_step"] == 10


def test_resume_with_another_lr_replans_the_schedule_at_that_lr(tiny_mnist: Path, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """sched.epochs=2 planned 8 steps, which the resumed run also ends at: only optim.lr asks for a new plan."""
    args = ("model=mlp", "model.hidden_sizes=[16]", "sched.epochs=2")  # 4 steps an epoch
    train(compose_train(tiny_mnist, *args, "trainer.max_epochs=1", "optim.lr=0.01"), run_dir=tmp_path / "first")
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    with caplog.at_level("INFO", logger="modelforge.train.module"):
        train(compose_train(tiny_mnist, *args, "trainer.max_epochs=2", "optim.lr=0.001", f"ckpt_path={last}"),
              run_dir=tmp_path / "resumed")
    assert ("resuming at step 4 of a schedule planned for 8 steps at optim.lr=0.01, now 0.001; sched.epochs ends "
            "it at step 8") in caplog.text
    group = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=True)["optimizer_states"][0]
    assert group["param_groups"][0]["max_lr"] == pytest.approx(0.001)  # the one-cycle peak is the new lr


@pytest.mark.filterwarnings("ignore:You defined a `validation_step`")  # LitTiny, fitted here without validation data
@pytest.mark.parametrize(("every_s", "step_lines"), [(0.0, 1), (1e9, 0)])
def test_a_progress_line_comes_at_least_every_every_s_seconds(every_s: float, step_lines: int,
                                                              caplog: pytest.LogCaptureFixture) -> None:

    from tests.helpers.lit_tiny import LitTiny, loader

    # 2 batches an epoch, 1 line per epoch by steps (at the last batch, where the epoch line
    # takes over): only the time trigger can print the line after step 1.
    trainer = pl.Trainer(callbacks=[LineProgress(lines_per_epoch=1, every_s=every_s)], max_epochs=1,
                         accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False)
    with caplog.at_level("INFO", logger="modelforge.report.progress"):
        trainer.fit(LitTiny(), loader())
    lines = [r.getMessage() for r in caplog.records if r.name == "modelforge.report.progress"]
    assert sum(line.startswith("epoch 1/1  step 1/2") for line in lines) == step_lines
    assert any(line.startswith("epoch 1/1 done in") for line in lines)


def test_resume_with_another_batch_size_continues_with_the_new_data_settings(tiny_mnist: Path, tmp_path: Path) -> None:
    # The README's Resuming table: data.* comes from the command line, the training state from the checkpoint.
    args = ("model=mlp", "model.hidden_sizes=[16]", "sched=none")
    train(compose_train(tiny_mnist, *args, "trainer.max_epochs=1"), run_dir=tmp_path / "first")  # 128 / 32: 4 steps
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    train(compose_train(tiny_mnist, *args, "trainer.max_epochs=2", "data.batch_size=16", f"ckpt_path={last}"),
          run_dir=tmp_path / "resumed")
    metrics = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["epochs"] == 2 and metrics["global_step"] == 4 + 128 // 16
    assert yaml.safe_load((tmp_path / "resumed" / "config.yaml").read_text())["data"]["batch_size"] == 16
