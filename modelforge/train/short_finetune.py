"""A fine-tune too short for BatchNorm: one warning as training starts, instead of a useless model at the end.

BatchNorm's running statistics move towards each training batch's by ``momentum`` (0.1 by default), so after
``n`` batches ``(1 - momentum) ** n`` of them still comes from the loaded weights' data. Evaluation normalizes
with them: a fine-tune of a few steps tests new weights with the old data's statistics (val/loss in the
thousands, accuracy near 0), which looks like a bug elsewhere.
"""

from __future__ import annotations

import logging
import math

import pytorch_lightning as pl
from torch import nn

log = logging.getLogger("modelforge.train")
SETTLED = 0.01  # the share of the loaded statistics still left that counts as replaced


class ShortFineTuneCheck(pl.Callback):
    """Warns when the norm layers that train (not ``frozen``) take too few batches to replace their statistics."""

    def __init__(self, source: str, frozen: tuple[str, ...] = (), attribute: str = "model") -> None:
        self.source = source
        self.frozen = set(frozen)
        self.attribute = attribute  # where the LightningModule keeps the network

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        network = getattr(pl_module, self.attribute)
        momenta = [m.momentum for name, m in network.named_modules()
                   if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
                   and m.momentum and name not in self.frozen]
        steps = trainer.estimated_stepping_batches
        if not momenta or not math.isfinite(steps):
            return
        batches = int(steps) * trainer.accumulate_grad_batches
        momentum = min(momenta)
        left = (1 - momentum) ** batches
        if left > SETTLED:
            needed = math.ceil(math.log(SETTLED) / math.log(1 - momentum))
            log.warning("init.from: %d BatchNorm layers train for %d batches only: with momentum %g, %.0f%% of "
                        "their running statistics will still come from %s's data, and evaluation normalizes with "
                        "them; train %d batches or more, or freeze those layers (freeze=[...] keeps their "
                        "statistics)", len(momenta), batches, momentum, 100 * left, self.source, needed)
