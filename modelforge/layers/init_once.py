"""Weights filled once: torch's default fills wait until they are needed, and an init rule's replaces them.

Every ``nn.Conv2d`` and ``nn.Linear`` draws its weights (``kaiming_uniform_``) as it is made; a model whose init
rules draw them again (``init: {conv: kaiming_normal}``) pays for both, and the first draw is a third of
torchvision's constructors. While :class:`DeferredFills` is active, a fill of a parameter (``uniform_``,
``normal_``, ``kaiming_uniform_``, ``constant_``, ``fill_``, ``zero_``, the functions or the tensor methods)
is recorded instead of run; a later fill of the same parameter replaces it, and any other use of the
parameter's values (an op that reads it, a view, ``.data``) runs its fill first, so nothing ever reads a
value it would not have read anyway. When the context ends the fills still waiting run, in the order they
were asked for. Reading a size, a dtype or a device is not a use.

The values a seed gives differ from filling eagerly (the draws left come in another order), but the same seed
gives the same weights, and every tensor is filled as its last fill says. torch's own mechanism: a
:class:`~torch.overrides.TorchFunctionMode` sees every torch call made under it.

Kept over torch's meta device (build on ``meta``, ``to_empty()``, ``reset_parameters()`` of each module the rules
do not fill whole, then the rules; ``torch.nn.utils.skip_init`` is the same for one module), measured with
experiments/benchmarks/init_once_vs_meta.py (build_model at 224x224, one process, 7 interleaved rounds, the
fastest of each; a shared 2-core machine under load). init_once, then torch's way on the blocks deferred here,
then on every block:

- resnet50: 889 ms; 1007 ms; 1028 ms
- vit_b_16: 2372 ms; 7684 ms; 6592 ms
- convnext_tiny: 1198 ms; 1118 ms; 1345 ms
- mobilenet_v3_small: 170 ms; 181 ms; 311 ms

It is slower for three of the four (a linear layer whose bias keeps torch's default draws its weight twice: a
module resets all its tensors or none), and it changes seeded weights: with seed 0, 85 of vit_b_16's 152 tensors
differ (on every block, 17% to 56% of each model's). It also leaves unset what a module fills in its constructor
and no ``reset_parameters`` fills again (a user's block from a plugin; torchvision's Swin, its position index).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

# Calls that draw every value of their first argument afresh, whatever it held: these wait.
_DRAWS = frozenset({nn.init.uniform_, nn.init.normal_, nn.init.kaiming_uniform_, Tensor.uniform_, Tensor.normal_})
# Calls that set every value of their first argument to a constant: run at once (cheap), replacing a waiting draw.
_SETS = frozenset({nn.init.constant_, Tensor.fill_, Tensor.zero_})
# Calls that read a tensor's metadata and not its values.
_METADATA = frozenset({
    Tensor.dim, Tensor.size, Tensor.numel, Tensor.nelement, Tensor.is_floating_point, Tensor.is_complex,
    Tensor.__len__, Tensor.stride, Tensor.element_size, Tensor.shape.__get__, Tensor.ndim.__get__,
    Tensor.dtype.__get__, Tensor.device.__get__, Tensor.layout.__get__, Tensor.requires_grad.__get__,
    Tensor.is_leaf.__get__, Tensor.is_meta.__get__, Tensor.is_sparse.__get__, Tensor.is_cuda.__get__,
})

_Draw = tuple[Callable[..., Any], tuple[Any, ...], Mapping[str, Any]]


class DeferredFills(TorchFunctionMode):
    """A context in which random fills of parameters wait until their values are read, or the context ends."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: dict[int, _Draw] = {}  # id(parameter) -> its last draw, in the order the draws came

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _DRAWS or func in _SETS:
            target = args[0] if args else kwargs.get("tensor")
            if _deferrable(target, args[1:], kwargs):
                self._waiting.pop(id(target), None)  # replaced: only the last fill counts
                if func in _DRAWS:
                    self._waiting[id(target)] = (func, args, kwargs)
                    return target
                return func(*args, **kwargs)
        if self._waiting and func not in _METADATA:
            self._run_read(args)
            self._run_read(kwargs.values())
        return func(*args, **kwargs)

    def _run_read(self, values: Any) -> None:
        """Run the waiting draws of the tensors in ``values`` (and of those they are views of)."""
        for value in values:
            if isinstance(value, (list, tuple)):
                self._run_read(value)
            elif isinstance(value, Tensor):
                for tensor in (value, value._base):
                    draw = self._waiting.pop(id(tensor), None) if tensor is not None else None
                    if draw is not None:
                        with torch.no_grad():  # as torch.nn.init fills a parameter
                            _run(draw)

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        super().__exit__(kind, value, traceback)
        waiting, self._waiting = list(self._waiting.values()), {}
        if kind is None and waiting:
            with torch.no_grad():
                for draw in waiting:
                    _run(draw)


def _deferrable(target: Any, rest: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """A parameter's own storage (not a view), filled from plain numbers (a tensor argument is read now)."""
    return (isinstance(target, nn.Parameter) and target._base is None
            and not any(isinstance(v, Tensor) for v in (*rest, *kwargs.values()) if v is not target))


def _run(draw: _Draw) -> None:
    func, args, kwargs = draw
    func(*args, **kwargs)
