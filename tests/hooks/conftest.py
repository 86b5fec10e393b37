"""The small hand-written model and batch the hook plugin tests share."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from tests.helpers.tiny_net import TinyNet
from tests.helpers.tiny_net import (  # noqa: F401  moved; for branches written before
    LEAF_SHAPES, PARAM_LAYERS, REQUIRED_OPTIONS, forward_backward, global_hook_count, hook_count, module_hooks,
    options_for)


@pytest.fixture
def model() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet()


@pytest.fixture
def batch() -> Tensor:
    return torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
