"""`model=unet` computes what a U-Net written by hand in plain torch.nn computes (Ronneberger et al.: two 3x3
conv-BN-ReLU per level, max pooling down, a 2x2 transposed conv up, the skip concatenated before the decoder's
convs, a 1x1 conv to the classes), given the same weights: in training mode and in eval mode, outputs and
gradients. (experiments/benchmarks/hand_written_unet.py times the segment task against such a model; this file
keeps its own, so that neither imports the other.)"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from torch import Tensor, nn

from modelforge import create_model


def _double_conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
                         nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class _Level(nn.Module):
    def __init__(self, c_in: int, sizes: Sequence[int]) -> None:
        super().__init__()
        self.enc = _double_conv(c_in, sizes[0])
        self.inner = _Level(sizes[0], sizes[1:]) if len(sizes) > 1 else None
        if self.inner is not None:
            self.up = nn.ConvTranspose2d(sizes[1], sizes[0], 2, stride=2)
            self.dec = _double_conv(2 * sizes[0], sizes[0])

    def forward(self, x: Tensor) -> Tensor:
        skip = self.enc(x)
        if self.inner is None:
            return skip
        return self.dec(torch.cat([skip, self.up(self.inner(nn.functional.max_pool2d(skip, 2)))], 1))


class _UNet(nn.Module):
    def __init__(self, sizes: Sequence[int], n_classes: int) -> None:
        super().__init__()
        self.body, self.head = _Level(1, sizes), nn.Conv2d(sizes[0], n_classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


@pytest.mark.parametrize("sizes", [[8, 16, 32], [4, 8]])
def test_unet_equals_a_hand_written_unet_with_its_weights(sizes: list[int]) -> None:
    built = create_model("unet", [f"params.enc_sizes={sizes}", "n_classes=11", "input_size=[16,16]"], seed=0)
    plain = _UNet(sizes, 11)
    source = built.state_dict()
    assert [v.shape for v in source.values()] == [v.shape for v in plain.state_dict().values()]
    plain.load_state_dict(dict(zip(plain.state_dict(), source.values())))  # the same modules, in the same order
    x = torch.randn(4, 1, 16, 16)
    for train in (True, False):
        built.train(train), plain.train(train)
        built.zero_grad(), plain.zero_grad()
        ours, theirs = built(x), plain(x)
        torch.testing.assert_close(ours, theirs)
        ours.square().mean().backward(), theirs.square().mean().backward()
        for (name, a), b in zip(built.named_parameters(), plain.parameters()):
            torch.testing.assert_close(a.grad, b.grad, msg=name)
