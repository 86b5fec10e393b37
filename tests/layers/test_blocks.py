from __future__ import annotations

import torch
from torch import nn

from modelforge.layers.blocks import Add, Concat, ConvBlock, LinearBlock


def test_conv_block_layers_in_order_and_shape() -> None:
    block = ConvBlock(3, 8, kernel_size=3, pool="max", dropout=0.1)
    assert [type(m) for m in block] == [nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d, nn.Dropout2d]
    assert block(torch.randn(2, 3, 16, 16)).shape == (2, 8, 8, 8)


def test_conv_block_leaves_out_what_is_off() -> None:
    block = ConvBlock(3, 8, norm=False, activation=None)
    assert [type(m) for m in block] == [nn.Conv2d]


def test_conv_block_repr_says_what_it_is() -> None:
    assert "3 -> 8, kernel=5, stride=2, padding=2, norm=True, act=gelu, pool=avg" in repr(
        ConvBlock(3, 8, kernel_size=5, stride=2, activation="gelu", pool="avg"))


def test_linear_block() -> None:
    block = LinearBlock(10, 4, activation="tanh", norm=True, dropout=0.5)
    assert [type(m) for m in block] == [nn.Linear, nn.BatchNorm1d, nn.Tanh, nn.Dropout]
    assert "10 -> 4, norm=True, act=tanh, dropout=0.5" in repr(block)


def test_merges() -> None:
    a, b = torch.randn(2, 3, 4, 4), torch.randn(2, 5, 4, 4)
    assert torch.equal(Add()(a, a), a * 2)
    assert torch.equal(Concat()(a, b), torch.cat([a, b], 1))
