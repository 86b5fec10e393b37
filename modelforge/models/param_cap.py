"""A cap on how many values a model holds, checked before any of them is allocated.

A width or a shape typed with a few zeros too many (``enc_sizes=[100000000]``, a ``parameter`` of shape
``[100000, 100000]``) would allocate gigabytes to terabytes before anything fails. The model is first made on
torch's meta device (shapes without storage, :mod:`modelforge.models.graph_meta`), its parameters and buffers
counted, and one greater than the model option ``max_params`` refused, naming the count, the cap, its key and
the largest tensor, before the real model is made.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from modelforge.config import require_positive
from modelforge.errors import ConfigError

MAX_PARAMS = 1_000_000_000  # 4 GB of float32: ViT-H holds 632 M, the zoo's largest (vit_b_16) 86 M
# The option, for models whose constructors do not take it: the builder reads it (modelforge.build).
PARAM_CAP_OPTION = {"max_params": (int, MAX_PARAMS)}
_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def _bytes(n: float) -> str:
    unit = 0
    while n >= 1000 and unit < len(_UNITS) - 1:
        n, unit = n / 1000, unit + 1
    return f"{n:.1f} {_UNITS[unit]}"


def check_param_count(model: nn.Module, max_params: int, path: str = "model",
                      where: Callable[[str], str] | None = None) -> None:
    """Refuse ``model`` (made on the meta device) if its parameters and buffers number more than ``max_params``.

    ``where(name)``: the config path to name for the tensor ``name`` (the model's ``path`` by default).
    """
    require_positive(max_params, f"{path}.max_params")
    tensors = [*model.named_parameters(), *model.named_buffers()]
    total = sum(t.numel() for _, t in tensors)
    if total <= max_params:
        return
    name, largest = max(tensors, key=lambda item: item[1].numel())
    size = sum(t.numel() * t.element_size() for _, t in tensors)
    raise ConfigError(where(name) if where is not None else path,
                      f"the model would hold {total:,} parameters and buffers ({_bytes(size)}), more than "
                      f"{path}.max_params ({max_params:,}); the largest is {name} {list(largest.shape)}",
                      hint=f"set {path}.max_params={total} if the model really is that large")
