"""Multiply-accumulates (MACs) of a model's forward pass, as torch's ``FlopCounterMode`` counts them.

``torch.utils.flop_counter`` counts the FLOPs of matrix products: convolutions
(``aten.convolution``), ``mm``/``addmm``/``bmm``, attention. Each
multiply-accumulate is two FLOPs there, so MACs = FLOPs / 2. What it does not
count is counted as 0 MACs here too: bias additions, normalization,
activations, pooling, element-wise merges (``add``/``concat``), dropout; for a
CNN they are well under 1% of the total. Figures are per sample: one forward
of ``batch_size`` zeros, divided by ``batch_size``, except the work of graph nodes whose inputs have no batch
dimension (``batch_free``: Swin-V2's position-bias MLP on a ``constant``), done once per call whatever the batch
and counted whole: the figure is a one-sample forward's. Importing this module loads neither Lightning nor Hydra.

Two layers are counted by formula because ``FlopCounterMode`` sees their fused CPU
kernels as 0: ``nn.LSTM``/``nn.GRU``/``nn.RNN`` (the gates' matrix products at every step)
and ``nn.MultiheadAttention`` (projections, scores and weighted sum, as its unfused path
counts them when gradients are on).

Why two ways of counting: entering ``FlopCounterMode`` imports ``torch._dynamo``
(1.5-2 s, more than ``import torch`` itself), which every ``summary`` and every
run's model line would pay. A model built only of layers whose count is known
(convolutions and linear layers by torch's formula, the zero-MAC layers above,
modelforge's blocks and models, whose forwards only call their children or element-wise ops, and
those that count their own matrix products, ``matmul``) is
counted from forward hooks instead; anything else, e.g. a user's block that calls
``torch.matmul`` itself, goes through ``FlopCounterMode``. A test checks both
ways agree on every shipped model and block.

``FlopCounterMode`` runs with every parameter's ``requires_grad`` off (restored after): its module
tracker hooks the autograd graph of each module's outputs, and under ``no_grad`` a view of a
parameter (a ``permute`` of a ``parameter`` node) requires grad without having a grad function,
where torch's ``register_multi_grad_hook`` fails with "Expected gradient function to be set"
(torch 2.13; no upstream issue found; ``tests/test_summary_macs.py`` fails when that is fixed).
The count does not need gradients.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from modelforge.layers.macs import BATCH_FREE, MACS_FROM_CHILDREN, OWN_MACS

FLOPS_PER_MAC = 2

# Layers with matrix products, counted per call from their output shape: out.numel() MACs per
# output element times the inputs each one sums (torch's conv_flop_count and mm formulas / 2).
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_TRANSPOSED_CONVS = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)  # a U-Net's upsampling
# Layers FlopCounterMode counts as 0 (no matrix product).
_ZERO = {
    nn.Identity, nn.Flatten, nn.Unflatten, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
    nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d,
    nn.InstanceNorm3d, nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
    nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU,
    nn.Mish, nn.Tanh, nn.Sigmoid, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Softplus, nn.Softsign,
    nn.Tanhshrink, nn.Softmax, nn.LogSoftmax, nn.Sequential, nn.ModuleList, nn.ModuleDict,
    nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d,
}


def _countable(module: nn.Module) -> bool:
    kind = type(module)  # exact type: a subclass may override forward
    if kind in _RNN_GATES:  # by formula, for plain tensor inputs (not packed sequences, not projections)
        return not module.proj_size
    return (kind in _ZERO or kind in _CONVS or kind in _TRANSPOSED_CONVS
            or kind in (nn.Linear, nn.MultiheadAttention)
            or kind is nn.modules.linear.NonDynamicallyQuantizableLinear  # MultiheadAttention's out_proj
            or kind.__dict__.get(MACS_FROM_CHILDREN, False) or OWN_MACS in kind.__dict__)


_RNN_GATES = {nn.RNN: 1, nn.GRU: 3, nn.LSTM: 4}


def _rnn_macs(module: nn.RNNBase, x: torch.Tensor) -> int:
    """Gate matrix products of every step, layer and direction (FlopCounterMode sees the fused
    CPU kernel as 0): per step, gates * hidden * (layer input + hidden)."""
    steps_times_batch = x.shape[0] * x.shape[1] if x.dim() == 3 else x.shape[0]
    directions = 2 if module.bidirectional else 1
    per_step, width = 0, module.input_size
    for _ in range(module.num_layers):
        per_step += directions * _RNN_GATES[type(module)] * module.hidden_size * (width + module.hidden_size)
        width = module.hidden_size * directions
    return steps_times_batch * per_step


def _attention_macs(module: nn.MultiheadAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    """Input projections, scores, weighted sum and output projection, as the unfused path's
    linear and matmul kernels count (the eval fast path's fused kernel counts 0 in FlopCounterMode)."""
    if not module.batch_first:
        q, k, v = (t.transpose(0, 1) if t.dim() == 3 else t for t in (q, k, v))
    batch, length, embed = (q.shape if q.dim() == 3 else (1, *q.shape))
    source = k.shape[-2]
    projections = length * embed * embed + source * (module.kdim + module.vdim) * embed + length * embed * embed
    return batch * (projections + 2 * length * source * embed)


def _layer_macs(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    if isinstance(module, _CONVS):
        return output.numel() * (module.in_channels // module.groups) * math.prod(module.kernel_size)
    if isinstance(module, _TRANSPOSED_CONVS):  # as torch's flop counter: every input pixel into a kernel's outputs
        return inputs[0].numel() * (module.out_channels // module.groups) * math.prod(module.kernel_size)
    if isinstance(module, nn.Linear):
        return inputs[0].numel() * module.out_features
    if type(module) in _RNN_GATES:
        return _rnn_macs(module, inputs[0])
    if type(module) is nn.MultiheadAttention:
        return _attention_macs(module, *inputs[:3])
    if OWN_MACS in type(module).__dict__:  # a block that multiplies matrices itself (matmul)
        return getattr(module, OWN_MACS)(inputs, output)
    return 0


def forward_macs(model: nn.Module, run: Callable[[], Any], batch_size: int) -> dict[str, int]:
    """Per-sample MACs of every submodule (``named_modules()`` names; ``""`` is the model) during ``run()``,
    a forward of ``batch_size`` samples. A parent's figure includes its children's."""
    modules = dict(model.named_modules())
    if all(_countable(m) for m in modules.values()):
        own: dict[str, int] = dict.fromkeys(modules, 0)
        called: set[str] = set()  # as FlopCounterMode: a container never called (ModuleDict) counts 0
        handles = []
        for name, module in modules.items():
            def record(m: nn.Module, inputs: tuple[Any, ...], output: Any, name: str = name) -> None:
                called.add(name)
                own[name] += FLOPS_PER_MAC * _layer_macs(m, inputs, output)

            handles.append(module.register_forward_hook(record))
        try:
            run()
        finally:
            for handle in handles:
                handle.remove()
        flops = {name: sum(v for n, v in own.items() if n == name or not name or n.startswith(name + "."))
                 if name in called else 0 for name in modules}
        return _per_sample(modules, flops, batch_size)
    from torch.utils.flop_counter import (
        FlopCounterMode,  # imports torch._dynamo on first use: see above
    )

    with _no_parameter_grads(model), FlopCounterMode(display=False) as counter:
        run()
    return macs_by_module(model, counter.get_flop_counts(), batch_size)


@contextlib.contextmanager
def _no_parameter_grads(model: nn.Module) -> Iterator[None]:
    """Every parameter's ``requires_grad`` off for a while, then as it was (see the module's docstring)."""
    was = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in was:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in was:
            p.requires_grad_(flag)


def macs_by_module(model: nn.Module, flop_counts: Mapping[str, Mapping[Any, int]], batch_size: int) -> dict[str, int]:
    """Per-sample MACs of every submodule (dotted names as in ``named_modules()``; ``""`` is the model).

    ``flop_counts`` is ``FlopCounterMode.get_flop_counts()`` of a forward of ``batch_size``
    samples; it names modules ``<ModelClass>.<dotted name>``. A parent's figure includes its children's.
    """
    root = type(model).__name__
    counts = {key: sum(ops.values()) for key, ops in flop_counts.items()}
    modules = dict(model.named_modules())
    flops = {name: counts.get(f"{root}.{name}" if name else root, 0) for name in modules}
    return _per_sample(modules, flops, batch_size)


def _per_sample(modules: Mapping[str, nn.Module], flops: Mapping[str, int], batch_size: int) -> dict[str, int]:
    """MACs per sample from each module's FLOPs in a forward of ``batch_size`` (a parent's including its children's):
    divided by the batch size, but for the work of batch-free modules (``BATCH_FREE``), counted once."""
    free = [n for n, m in modules.items() if getattr(m, BATCH_FREE, False)]
    free = [n for n in free if not any(n.startswith(f + ".") for f in free)]  # the outermost
    result = {}
    for name in modules:
        inside = [f for f in free if f == name or (name and name.startswith(f + "."))]
        once = flops[name] if inside else sum(flops[f] for f in free if not name or f.startswith(name + "."))
        result[name] = (flops[name] - once) // (FLOPS_PER_MAC * batch_size) + once // FLOPS_PER_MAC
    return result


def count_macs(model: nn.Module, input_shape: tuple[int, ...] | list[int], batch_size: int = 1) -> tuple[int, dict[str, int]]:
    """Multiply-accumulates of one sample's forward pass: ``(total, {module name: MACs})``.

    Runs ``batch_size`` zero inputs of ``input_shape`` (without the batch dimension)
    through ``model`` in eval mode without gradients, on the device of its parameters;
    the model's train/eval mode is restored. Every module of ``named_modules()`` except
    the model itself is in the dict (0 for those without matrix products).
    """
    was_training = model.training
    try:
        per_module = forward_macs(model, zeros_forward(model, input_shape, batch_size), batch_size)
    finally:
        model.train(was_training)
    return per_module[""], {name: macs for name, macs in per_module.items() if name}


def zeros_forward(model: nn.Module, input_shape: tuple[int, ...] | list[int], batch_size: int) -> Callable[[], Any]:
    """A forward of ``batch_size`` zero inputs through ``model`` in eval mode without gradients,
    on the device of its parameters (the caller restores train mode)."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")

    def run() -> Any:
        with torch.no_grad():
            return model.eval()(torch.zeros(batch_size, *input_shape, device=device))

    return run


def format_macs(macs: int) -> str:
    """``4241152`` -> ``4.24 M``: a short figure for one-line descriptions."""
    for unit, size in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if macs >= size:
            return f"{macs / size:.2f} {unit}"
    return str(macs)
