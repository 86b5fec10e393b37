"""Two small networks alike in structure but not in names, nesting or order: what weight pairing must see through."""

from __future__ import annotations

import torch
from torch import nn


class ScaleFirst(nn.Module):
    """Registers ``scale`` on itself, before the layers that run first: its state_dict lists it first (as
    torchvision's ConvNeXt block does its layer scale, and its ViT its class token)."""

    def __init__(self, n_out: int = 5) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4, 1))
        self.conv = nn.Conv1d(3, 4, 3)
        self.norm = nn.BatchNorm1d(4)
        self.head = nn.Linear(4, n_out)


class Ours(nn.Module):
    """The same network as ScaleFirst, named and nested otherwise, its scale registered after the layers."""

    def __init__(self, n_out: int = 5) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(3, 4, 3), nn.BatchNorm1d(4))
        self.gamma = nn.Module()
        self.gamma.weight = nn.Parameter(torch.ones(4, 1))
        self.fc = nn.Linear(4, n_out)
