"""The Lightning callback that attaches hook plugins for the length of each trainer run.

Plugins attach in the callback's ``setup``, which Lightning 2.x runs before the module's (where modelforge
compiles the model) and the strategy's device move and wrapping, so ``torch.compile`` sees the hooks in every kind of run.
``teardown`` or an exception removes them: a model leaves ``trainer.fit`` without hooks, and no checkpoint holds one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from torch import nn

from modelforge.hooks import HookHandle, HookPlugin, check_precision


class HookPluginsCallback(pl.Callback):
    """Attach ``plugins`` to ``pl_module.model`` (or the module itself) per run; they write files to ``run_dir``."""

    def __init__(self, plugins: Sequence[HookPlugin], run_dir: str | Path | None = None) -> None:
        self.plugins = list(plugins)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.handles: list[HookHandle] = []
        self._target: nn.Module | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Refused before any hook exists: fp16 AMP would feed scaled gradients to grad_clip.
        check_precision(self.plugins, trainer.precision)
        model = getattr(pl_module, "model", None)
        self._target = model if isinstance(model, nn.Module) else pl_module
        run_dir = self.run_dir if self.run_dir is not None else Path(trainer.default_root_dir)
        self._remove()
        try:
            for plugin in self.plugins:
                self.handles.append(plugin.attach(self._target, run_dir=run_dir, logger=trainer.logger))
        except BaseException:
            self._remove()
            raise

    def on_train_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        for plugin in self.plugins:
            plugin.step = trainer.global_step
        self._set_stage(trainer)

    def _set_stage(self, trainer: pl.Trainer, *_: Any, **__: Any) -> None:
        stage = trainer.state.stage  # "sanity_check" before training: verbose skips it
        for plugin in self.plugins:
            plugin.stage = stage.value if stage is not None else None

    on_validation_batch_start = on_test_batch_start = on_predict_batch_start = _set_stage

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        for plugin in self.plugins:  # e.g. grad_cam explains the first test batch
            plugin.after_test_batch(self._target if self._target is not None else pl_module, batch, batch_idx)

    def _remove(self, *_: Any, **__: Any) -> None:
        while self.handles:
            self.handles.pop().remove()
        for plugin in self.plugins:
            plugin.step = plugin.stage = None

    teardown = on_exception = _remove
