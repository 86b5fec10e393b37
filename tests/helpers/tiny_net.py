"""A small hand-written model and hook counters shared by the hook plugin tests."""

from __future__ import annotations

import torch.nn.modules.module as torch_module
from torch import Tensor, nn

# Output shapes of TinyNet's leaves for a [2, 1, 8, 8] batch, in named_modules() order.
LEAF_SHAPES = {
    "encoder.0": ("Conv2d", [2, 4, 8, 8]),
    "encoder.1": ("BatchNorm2d", [2, 4, 8, 8]),
    "encoder.2": ("ReLU", [2, 4, 8, 8]),
    "encoder.3": ("Conv2d", [2, 6, 8, 8]),
    "encoder.4": ("ReLU", [2, 6, 8, 8]),
    "decoder.0": ("Flatten", [2, 384]),
    "decoder.1": ("Linear", [2, 10]),
}
PARAM_LAYERS = ["encoder.0", "encoder.1", "encoder.3", "decoder.1"]

# Plugins without a sensible default target (ablating "everything" means nothing): what generic tests give them.
REQUIRED_OPTIONS: dict[str, dict[str, object]] = {"ablate": {"layers": ["encoder.3"], "channels": [0]}}


def options_for(name: str, **options: object) -> dict[str, object]:
    """Plugin ``name``'s options for a generic test: its required ones, then ``options`` on top."""
    return {**REQUIRED_OPTIONS.get(name, {}), **options}

MODULE_HOOK_DICTS = (
    "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
)
GLOBAL_HOOK_DICTS = (
    "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
    "_global_backward_pre_hooks", "_global_forward_hooks_always_called", "_global_forward_hooks_with_kwargs",
)


class TinyNet(nn.Module):
    """A conv encoder (with an in-place ReLU after the norm) and a linear decoder, on 1x8x8 inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
            nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(),
        )
        self.decoder = nn.Sequential(nn.Flatten(), nn.Linear(6 * 8 * 8, 10))

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.encoder(x))


def module_hooks(model: nn.Module) -> dict[str, int]:
    """Hooks on every module and on every parameter tensor, by the dict that holds them."""
    counts = {name: sum(len(getattr(m, name)) for m in model.modules()) for name in MODULE_HOOK_DICTS}
    counts["tensor._backward_hooks"] = sum(len(p._backward_hooks or {}) for p in model.parameters())
    counts["tensor._post_accumulate_grad_hooks"] = sum(
        len(p._post_accumulate_grad_hooks or {}) for p in model.parameters())
    return counts


def hook_count(model: nn.Module) -> int:
    return sum(module_hooks(model).values())


def global_hook_count() -> int:
    return sum(len(getattr(torch_module, name)) for name in GLOBAL_HOOK_DICTS)


def forward_backward(model: nn.Module, x: Tensor) -> Tensor:
    """One forward and backward with a loss large enough that some gradients exceed small bounds."""
    out = model(x)
    (out.pow(2).sum() * 10).backward()
    return out
