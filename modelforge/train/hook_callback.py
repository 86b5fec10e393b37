"""The Lightning callback that attaches hook plugins for the length of each trainer run.

Order assumed (Lightning 2.x ``Trainer._run``): callbacks' ``setup`` -> the
LightningModule's ``setup`` -> ``configure_model`` (where modelforge compiles the
model) -> strategy setup (device move, DDP wrapping). Plugins attach in ``setup``,
so ``torch.compile`` sees their hooks, and the same holds for fit, validate,
test and predict runs. They are removed in ``teardown`` (and on an exception),
so a model leaves ``trainer.fit`` without hooks. Hooks never reach a checkpoint:
they are not part of any ``state_dict`` and this callback keeps no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from torch import nn

from modelforge.hooks import HookHandle, HookPlugin, check_precision


class HookPluginsCallback(pl.Callback):
    """Attach ``plugins`` to ``pl_module.model`` (or the module itself) during each trainer run.

    Args:
        plugins: built plugins, e.g. from :func:`modelforge.hooks.build_hook_plugins`.
        run_dir: where plugins write files (feature images); default ``trainer.default_root_dir``.
    """

    def __init__(self, plugins: Sequence[HookPlugin], run_dir: str | Path | None = None) -> None:
        self.plugins = list(plugins)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.handles: list[HookHandle] = []
        self._target: nn.Module | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Refused before any hook exists: fp16 AMP would feed scaled gradients to grad_clip.
        check_precision(self.plugins, trainer.precision)
        model = getattr(pl_module, "model", None)
        target = model if isinstance(model, nn.Module) else pl_module
        self._target = target
        run_dir = self.run_dir if self.run_dir is not None else Path(trainer.default_root_dir)
        self._remove()
        try:
            for plugin in self.plugins:
                self.handles.append(plugin.attach(target, run_dir=run_dir, logger=trainer.logger))
        except BaseException:
            self._remove()
            raise

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        for plugin in self.plugins:
            plugin.step = trainer.global_step
        self._set_stage(trainer)

    def on_validation_batch_start(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        self._set_stage(trainer)  # "sanity_check" before training: verbose skips it

    def on_test_batch_start(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        self._set_stage(trainer)

    def on_predict_batch_start(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        self._set_stage(trainer)

    def _set_stage(self, trainer: pl.Trainer) -> None:
        stage = trainer.state.stage
        for plugin in self.plugins:
            plugin.stage = stage.value if stage is not None else None

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        for plugin in self.plugins:  # e.g. grad_cam explains the first test batch
            plugin.after_test_batch(self._target if self._target is not None else pl_module, batch, batch_idx)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._remove()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._remove()

    def _remove(self) -> None:
        while self.handles:
            self.handles.pop().remove()
        for plugin in self.plugins:
            plugin.step = plugin.stage = None
