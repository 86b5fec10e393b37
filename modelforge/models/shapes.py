"""Shape arithmetic shared by model builders and their config checks, and how an output's shapes are shown."""

from __future__ import annotations

from typing import Any

import torch


def conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a convolution along one spatial dimension (PyTorch's formula)."""
    return (size + 2 * padding - kernel) // stride + 1


def encoder_sizes(
    input_size: tuple[int, int] | list[int],
    n_layers: int,
    kernel_size: int,
    stride: int,
    padding: int,
    pool_size: int | None,
) -> list[tuple[int, int]]:
    """Spatial size after each conv block: conv, then pooling when ``pool_size`` is set."""
    h, w = input_size
    out = []
    for _ in range(n_layers):
        h, w = conv_out(h, kernel_size, stride, padding), conv_out(w, kernel_size, stride, padding)
        if pool_size:
            h, w = h // pool_size, w // pool_size
        out.append((h, w))
    return out


def describe_output(output: Any) -> str:
    """Shapes of a module output: a tensor, or tuples/lists/dicts of them (nested)."""
    if isinstance(output, torch.Tensor):
        return str(list(output.shape))
    if isinstance(output, (tuple, list)):
        return "(" + ", ".join(describe_output(o) for o in output) + ")"
    if isinstance(output, dict):
        return "{" + ", ".join(f"{k}: {describe_output(v)}" for k, v in output.items()) + "}"
    return type(output).__name__


DRY_BATCH = 2  # the batch a graph's dry run shows in its messages, and runs for real when a block fails


def shown_shape(value: Any) -> list[int]:
    """A dry-run value's shape as messages show it: the empty batch as :data:`DRY_BATCH` (wherever a block put it:
    an LSTM's states hold it second; no other dimension of a model's tensors is empty)."""
    return [DRY_BATCH if size == 0 else size for size in value.shape] if isinstance(value, torch.Tensor) else []


def describe_dry(output: Any) -> str:
    """:func:`describe_output` of a dry run's output (tensors of an empty batch), the batch shown as 2."""
    if isinstance(output, torch.Tensor):
        return str(shown_shape(output))
    if isinstance(output, (tuple, list)):
        return "(" + ", ".join(describe_dry(o) for o in output) + ")"
    if isinstance(output, dict):
        return "{" + ", ".join(f"{k}: {describe_dry(v)}" for k, v in output.items()) + "}"
    return type(output).__name__
