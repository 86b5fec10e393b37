"""A loss that stops being a number (or leaves its bound) stops the run at that step, exit 3."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from modelforge.errors import Diverged
from modelforge.train import train
from modelforge.train.stopping import DivergenceGuard
from tests.helpers.run_config import compose_train, tiny_cli_args

# _NanAtStep validates only in the tests that give it validation data.
pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")


def _strict(text: str) -> dict:
    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_sgd_at_lr_1e6_stops_naming_the_step_and_exits_3(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = run_main("train", "model=cnn", "enc_sizes=[8,16]", "optim=sgd", "optim.lr=1e6", "trainer.max_epochs=1",
                 *tiny_cli_args(tiny_mnist), f"hydra.run.dir={run}")
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    match = re.search(r"error: training diverged at step (\d+) \(epoch 0\): loss (\S+)", result.stderr)
    assert match, result.stderr[-2000:]
    assert "optim.lr=1000000.0" in result.stderr and "trainer.precision=32-true" in result.stderr
    metrics = _strict((run / "metrics.json").read_text())
    assert metrics["status"] == "diverged" and metrics["global_step"] == int(match.group(1))
    assert "resume_with" not in metrics and not (run / "checkpoints" / "interrupted.ckpt").exists()


def test_a_nan_loss_stops_the_run_even_without_a_bound(tiny_mnist: Path, tmp_path: Path) -> None:
    cfg = compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]", "optim=sgd", "optim.lr=1e30",
                        "sched=none", "divergence.max_loss=null", "trainer.max_epochs=5")
    with pytest.raises(Diverged, match=r"training diverged at step \d+ \(epoch \d\): loss (nan|inf)\. Likely causes"):
        train(cfg, run_dir=tmp_path)
    metrics = _strict((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "diverged"


def test_adam_at_lr_1e6_does_not_finish_silently(tiny_mnist: Path, tmp_path: Path) -> None:
    cfg = compose_train(tiny_mnist, "model=cnn", "enc_sizes=[8,16]", "optim.lr=1e6", "trainer.max_epochs=3")
    with pytest.raises(Diverged, match=r"loss \S+ above divergence.max_loss=10000"):
        train(cfg, run_dir=tmp_path)


def test_a_bad_bound_on_the_command_line_stops_before_the_run_directory_exists(run_main, tiny_mnist: Path,
                                                                             tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = run_main("train", "divergence.max_loss=-1", *tiny_cli_args(tiny_mnist), f"hydra.run.dir={run}")
    assert result.returncode == 2
    assert "error: divergence.max_loss: got -1.0\n  allowed: null or a number > 0" in result.stderr
    assert not run.exists()


def test_a_bad_bound_is_a_config_error(tiny_mnist: Path, tmp_path: Path) -> None:
    from modelforge.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^divergence.max_loss: got -1.0\n  allowed: null or a number > 0$"):
        train(compose_train(tiny_mnist, "divergence.max_loss=-1"), run_dir=tmp_path)


@pytest.mark.parametrize(("value", "got"), [("abc", "str 'abc'"), ("true", "bool True")])
def test_a_bound_that_is_no_number_is_refused_as_it_is_composed(value: str, got: str, tiny_mnist: Path) -> None:
    from hydra.errors import ConfigCompositionException

    from modelforge.config import omegaconf_error

    with pytest.raises(ConfigCompositionException) as info:
        compose_train(tiny_mnist, f"divergence.max_loss={value}")
    assert str(omegaconf_error(info.value.__cause__)) == (f"divergence.max_loss: expected float or null, got {got}\n"
                                                          "  allowed: float or null")


class _NanAtStep(pl.LightningModule):
    """A linear model whose loss is NaN at one step (4 steps per epoch on ``_loader``)."""

    def __init__(self, bad_step: int) -> None:
        super().__init__()
        self.layer, self.bad_step, self.validated = torch.nn.Linear(4, 1), bad_step, 0

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        return loss * float("nan") if self.global_step == self.bad_step else loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.validated += 1
        self.log("val/loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)


def _fit(guard: DivergenceGuard, bad_step: int, ckpt_dir: Path, validate: bool,
         accelerator: str = "cpu") -> tuple[pl.Trainer, Diverged]:
    trainer = pl.Trainer(accelerator=accelerator, devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_last=True), guard])
    with pytest.raises(Diverged) as raised:
        trainer.fit(_NanAtStep(bad_step), _loader(), _loader() if validate else None)
    return trainer, raised.value


def test_on_the_cpu_the_guard_stops_before_the_bad_step_is_taken(tmp_path: Path) -> None:
    trainer, error = _fit(DivergenceGuard(), bad_step=1, ckpt_dir=tmp_path, validate=False)
    assert "training diverged at step 1 (epoch 0): loss nan" in str(error)
    assert trainer.global_step == 1  # no optimizer step on the NaN


def test_a_deferred_check_as_on_a_gpu_stops_one_step_later_naming_the_bad_step(tmp_path: Path) -> None:
    trainer, error = _fit(DivergenceGuard(deferred=True), bad_step=1, ckpt_dir=tmp_path, validate=False)
    assert "training diverged at step 1 (epoch 0): loss nan" in str(error)
    assert trainer.global_step == 2  # the bad step was taken; the next one's check stopped the run


@pytest.mark.parametrize("validate", [True, False], ids=["before validation", "before the epoch's checkpoint"])
def test_a_deferred_check_keeps_a_bad_last_step_out_of_every_checkpoint(validate: bool, tmp_path: Path) -> None:
    trainer, error = _fit(DivergenceGuard(deferred=True), bad_step=3, ckpt_dir=tmp_path, validate=validate)
    assert "training diverged at step 3 (epoch 0): loss nan" in str(error)
    assert trainer.lightning_module.validated == 0  # stopped before validating NaN weights
    assert list(tmp_path.iterdir()) == []  # epoch 0 ended on the NaN step: nothing of it is saved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_single_gpu_the_guard_defers_its_check_by_one_step(tmp_path: Path) -> None:
    trainer, error = _fit(DivergenceGuard(), bad_step=1, ckpt_dir=tmp_path, validate=False, accelerator="gpu")
    assert "training diverged at step 1 (epoch 0): loss nan" in str(error)
    assert trainer.global_step == 2


def test_a_scaled_16_mixed_loss_is_compared_with_max_loss_unscaled(tmp_path: Path) -> None:
    """16-mixed with a gradient scaler hands callbacks the loss times the scale (65536 at first)."""
    from pytorch_lightning.plugins.precision import MixedPrecision

    class Seen(pl.Callback):
        def __init__(self) -> None:
            self.losses: list[float] = []

        def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
            self.losses.append(float(loss.detach()))

    torch.manual_seed(0)
    seen, scaled = Seen(), MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))  # as on a GPU
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, plugins=[scaled],
                         callbacks=[seen, DivergenceGuard(max_loss=100.0)])
    trainer.fit(_NanAtStep(bad_step=-1), _loader())
    assert trainer.global_step == 4  # every loss is below 100 ...
    assert min(seen.losses) > 100.0  # ... though what the callbacks get is scaled above it
