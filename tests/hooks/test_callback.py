"""HookPluginsCallback in a real Lightning Trainer: hooks live during each run and are gone after."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch

from modelforge.errors import ConfigError
from modelforge.hooks import build_hook_plugins
from modelforge.registry import HOOKS
from modelforge.train.hook_callback import HookPluginsCallback
from tests.helpers.lit_tiny import LitTiny, MemoryLogger, loader
from tests.helpers.tiny_net import global_hook_count, hook_count, options_for

CLIP = 0.01
# Lightning's advice about tiny loaders and logging intervals is noise for these runs.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*treespec"),
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`"),
    pytest.mark.filterwarnings("ignore:The number of training batches"),
]


class Probe(pl.Callback):
    """Records what the model looks like while the trainer runs (placed after the hook callback)."""

    def __init__(self) -> None:
        self.hooks: dict[str, int] = {}
        self.max_grad = 0.0
        self.state_keys: list[str] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.hooks["train"] = hook_count(pl_module.model)
        self.state_keys = list(pl_module.state_dict())

    def on_after_backward(self, trainer, pl_module):
        self.max_grad = max(p.grad.abs().max().item() for p in pl_module.model.parameters())

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.hooks.setdefault("val", hook_count(pl_module.model))

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.hooks["test"] = hook_count(pl_module.model)


def trainer(callbacks: list[pl.Callback], **options) -> pl.Trainer:
    defaults = dict(fast_dev_run=True, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
    return pl.Trainer(callbacks=callbacks, **{**defaults, **options})


def all_plugins() -> list:
    return build_hook_plugins({"verbose": {}, "grad_clip": {"value": CLIP}, "grad_monitor": {},
                               "feature_capture": {"layers": ["encoder.0"], "save_images": True, "max_images": 1}})


def test_hooks_are_attached_during_fit_and_gone_after(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="modelforge.hooks.verbose")
    plugins = all_plugins()
    probe, module = Probe(), LitTiny()
    baseline_keys = list(LitTiny().state_dict())
    trainer([HookPluginsCallback(plugins, run_dir=tmp_path), probe]).fit(module, loader(), loader())
    assert probe.hooks["train"] > 0 and probe.hooks["val"] > 0
    assert hook_count(module.model) == 0 and global_hook_count() == 0
    assert 0 < probe.max_grad <= CLIP  # grad_clip acted on the real training step
    assert probe.state_keys == baseline_keys  # nothing of the hooks reaches a checkpoint
    verbose, _, monitor, capture = plugins
    assert any(r.getMessage().startswith("encoder.0") for r in caplog.records)
    assert set(monitor.norms) == {"encoder.0", "encoder.1", "encoder.3", "decoder.1"}
    assert list(capture.features["encoder.0"].shape) == [4, 4, 8, 8]
    assert [p.name for p in (tmp_path / "features").iterdir()] == ["encoder.0_step000.png"]
    assert not any(p.attached for p in plugins)


def test_validate_and_test_runs_attach_too(tmp_path: Path) -> None:
    probe, module = Probe(), LitTiny()
    fit = trainer([HookPluginsCallback(build_hook_plugins({"feature_capture": {}}), run_dir=tmp_path), probe])
    fit.validate(module, loader())
    assert probe.hooks["val"] > 0 and hook_count(module.model) == 0
    fit.test(module, loader())
    assert probe.hooks["test"] > 0 and hook_count(module.model) == 0


def test_a_checkpoint_saved_with_hooks_attached_holds_no_trace_of_them(tmp_path: Path) -> None:
    path = tmp_path / "during.ckpt"

    class SaveDuringFit(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            assert hook_count(pl_module.model) > 0
            trainer.save_checkpoint(path)

    module = LitTiny()
    plugins = build_hook_plugins({n: options_for(n) for n in HOOKS.names()})
    trainer([HookPluginsCallback(plugins, run_dir=tmp_path), SaveDuringFit()]).fit(module, loader())
    ckpt = torch.load(path, weights_only=True)
    assert list(ckpt["state_dict"]) == list(LitTiny().state_dict())
    assert not any("HookPlugins" in key for key in ckpt.get("callbacks", {}))


def test_grad_monitor_writes_to_the_trainer_logger_at_global_steps(tmp_path: Path) -> None:
    logger = MemoryLogger()
    plugins = build_hook_plugins({"grad_monitor": {"log_every": 1, "layers": ["decoder.1"]}})
    trainer([HookPluginsCallback(plugins)], fast_dev_run=False, max_steps=3, limit_val_batches=0,
            logger=logger, default_root_dir=tmp_path).fit(LitTiny(), loader())
    logged = [(m["grad_norm/decoder.1"], step) for m, step in logger.metrics if "grad_norm/decoder.1" in m]
    assert [step for _, step in logged] == [0, 1, 2]
    assert logged[-1][0] == plugins[0].norms["decoder.1"]


def test_an_exception_during_fit_still_removes_the_hooks(tmp_path: Path) -> None:
    module = LitTiny(fail=True)
    with pytest.raises(RuntimeError, match="boom"):
        trainer([HookPluginsCallback(all_plugins(), run_dir=tmp_path)]).fit(module, loader())
    assert hook_count(module.model) == 0


@pytest.mark.parametrize("precision", ["16-mixed", "16"])
def test_float16_mixed_precision_with_grad_clip_is_refused_before_any_hook(precision: str, tmp_path: Path) -> None:
    module = LitTiny()
    fake_trainer = SimpleNamespace(precision=precision, default_root_dir=str(tmp_path), logger=None)
    callback = HookPluginsCallback(all_plugins())
    with pytest.raises(ConfigError, match=r"^hooks\.grad_clip: cannot clamp gradients under trainer\.precision=16"):
        callback.setup(fake_trainer, module, "fit")
    assert hook_count(module.model) == 0


def test_bf16_mixed_precision_is_accepted(tmp_path: Path) -> None:
    module = LitTiny()
    callback = HookPluginsCallback(all_plugins(), run_dir=tmp_path)
    callback.setup(SimpleNamespace(precision="bf16-mixed", default_root_dir=str(tmp_path), logger=None), module, "fit")
    assert hook_count(module.model) > 0
    callback.teardown(None, module, "fit")
    assert hook_count(module.model) == 0
