"""The default ``unet`` written by hand in plain ``torch.nn``: the segment task's "without modelforge" baseline."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


def double_conv(in_channels: int, out_channels: int) -> nn.Sequential:
    """Two 3x3 conv (no bias), BatchNorm, ReLU."""
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False), nn.BatchNorm2d(out_channels),
                         nn.ReLU(), nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
                         nn.BatchNorm2d(out_channels), nn.ReLU())


class Level(nn.Module):
    """One U-Net level: ``enc``; below it (while sizes are left) pool, the next level, upsample, concat, ``dec``."""

    def __init__(self, in_channels: int, sizes: Sequence[int]) -> None:
        super().__init__()
        self.enc = double_conv(in_channels, sizes[0])
        self.inner = Level(sizes[0], sizes[1:]) if len(sizes) > 1 else None
        if self.inner is not None:
            self.up = nn.ConvTranspose2d(sizes[1], sizes[0], 2, stride=2)
            self.dec = double_conv(2 * sizes[0], sizes[0])

    def forward(self, x: Tensor) -> Tensor:
        skip = self.enc(x)
        if self.inner is None:
            return skip
        up = self.up(self.inner(nn.functional.max_pool2d(skip, 2)))
        return self.dec(torch.cat([skip, up], 1))


class HandWrittenUNet(nn.Module):
    def __init__(self, in_channels: int, sizes: Sequence[int], n_classes: int) -> None:
        super().__init__()
        self.body = Level(in_channels, sizes)
        self.head = nn.Conv2d(sizes[0], n_classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


def hand_written_unet(built: nn.Module, sizes: Sequence[int], n_classes: int, input_size: int = 56) -> nn.Module:
    """A ``HandWrittenUNet`` with the weights of ``built`` (modelforge's ``unet`` of ``enc_sizes=sizes``), checked
    to give the same outputs, so that the two time the same computation."""
    plain = HandWrittenUNet(1, sizes, n_classes)
    source, target = built.state_dict(), plain.state_dict()
    # The same modules in the same order (enc, inner, up, dec; then the head): the tensors pair up one by one.
    assert [v.shape for v in source.values()] == [v.shape for v in target.values()], "another architecture"
    plain.load_state_dict(dict(zip(target, source.values())))
    x = torch.randn(2, 1, input_size, input_size)
    built.eval(), plain.eval()
    with torch.no_grad():
        assert torch.allclose(built(x), plain(x), atol=1e-5), "the hand-written U-Net differs from the built one"
    built.train(), plain.train()
    return plain
