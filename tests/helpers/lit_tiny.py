"""A tiny LightningModule around TinyNet, its loader and an in-memory logger: real Lightning runs in a second."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import Logger
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.tiny_net import TinyNet


class LitTiny(pl.LightningModule):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = TinyNet()
        self.fail = fail

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.model(x), y)

    def training_step(self, batch, batch_idx):
        if self.fail:
            raise RuntimeError("boom")
        return self._loss(batch) * 100  # large gradients, so clipping has work to do

    def validation_step(self, batch, batch_idx):
        self._loss(batch)

    def test_step(self, batch, batch_idx):
        self._loss(batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class MemoryLogger(Logger):
    def __init__(self) -> None:
        super().__init__()
        self.metrics: list[tuple[dict, int]] = []

    name = "memory"
    version = "0"

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.metrics.append((dict(metrics), step))


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)),
                      batch_size=4)
