"""The default ``cnn`` written by hand in plain ``torch.nn``: the "without modelforge" baseline."""

from __future__ import annotations

import torch
from torch import nn


def hand_written_cnn(built: nn.Module, dropout: float = 0.25) -> nn.Sequential:
    """conv-BN-ReLU-maxpool x2 (32, 64), flatten, Linear(3136, 128)-ReLU-Dropout, Linear(128, 10).

    Takes the weights of ``built`` (``build_model({"name": "cnn"})``) and checks that both give
    the same outputs, so the two time the same computation.
    """
    plain = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(dropout), nn.Linear(128, 10),
    )
    source = built.state_dict()
    assert [v.shape for v in source.values()] == [v.shape for v in plain.state_dict().values()]
    plain.load_state_dict(dict(zip(plain.state_dict(), source.values())))
    x = torch.randn(4, 1, 28, 28)
    built.eval(), plain.eval()
    with torch.no_grad():
        assert torch.allclose(built(x), plain(x), atol=1e-5), "the hand-written CNN differs from the built one"
    built.train(), plain.train()
    return plain
