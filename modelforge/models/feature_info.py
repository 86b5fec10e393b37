"""``feature_info`` of a graph built with ``features``: each named output's channels and stride, as timm reports them.

``num_chs`` is the channels whatever the layout (``[C, H, W]``, channels-last ``[H, W, C]``, tokens ``[L, D]``),
``reduction`` the network's stride at that node, measured by running the built graph once more on an empty batch
a little larger (:func:`feature_info`), not a rounded ratio of sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.models.graph_dry_run import empty_batch

PROBE = 64  # pixels added to each side to measure strides: a multiple of every power-of-two stride up to 64


def feature_info(graph: nn.Module, refs: Sequence[Any], outputs: Sequence[Any],
                 input_shape: Sequence[int]) -> list[dict[str, Any]]:
    """Each named output's node, channels and reduction (the network's stride there), as timm's ``feature_info``.

    The graph is run once more on an empty batch ``PROBE`` pixels larger a side: the sizes that grow are the
    map's sides (or a sequence's tokens), the one that stays is the channels, whatever the layout (``[C, H, W]``,
    channels-last ``[H, W, C]``, tokens ``[L, D]``); the stride is ``PROBE`` over a side's growth (for tokens, the
    square root of the input's growth in pixels over the growth in tokens: a ViT's patch size). A graph that cannot
    run at another size (a learned position embedding) is read from its shapes alone (:func:`_static_info`).
    """
    larger = [*input_shape[:-2], *(side + PROBE for side in input_shape[-2:])]
    graph.eval()  # as the dry run runs each block
    try:
        with torch.no_grad():
            probed = graph(empty_batch(*larger)) if len(input_shape) == 3 else None
    except Exception:  # noqa: BLE001  (it does not run there: read the shapes alone)
        probed = None
    finally:
        graph.train()
    if isinstance(probed, Tensor):  # one named output
        probed = (probed,)
    info = []
    for k, (ref, value) in enumerate(zip(refs, outputs)):
        shape = list(value.shape[1:]) if isinstance(value, Tensor) else None
        grown = list(probed[k].shape[1:]) if probed is not None and isinstance(probed[k], Tensor) else None
        measured = _measured(shape, grown, input_shape) if shape and grown and len(grown) == len(shape) else None
        channels, stride = measured or _static_info(shape, input_shape[-2:]) if shape else (None, None)
        info.append({"module": str(ref), "num_chs": channels, "reduction": stride, "shape": shape})
    _drop_probe_graphs(graph)
    return info


def _measured(shape: list[int], grown: list[int], input_shape: Sequence[int]) -> tuple[int, int | None] | None:
    """Channels and stride from an output's sizes at two input sizes (None: not one fixed size among growing)."""
    fixed = [d for d, (a, b) in enumerate(zip(shape, grown)) if a == b]
    growing = [d for d in range(len(shape)) if d not in fixed]
    if not growing:  # pooled: channels, and no stride
        return _static_info(shape, input_shape[-2:])[0], None
    if len(fixed) != 1:
        return None
    channels = shape[fixed[0]]
    if len(growing) == 2:  # a map's sides
        return channels, _whole(PROBE / (grown[growing[0]] - shape[growing[0]]))
    pixels = math.prod(s + PROBE for s in input_shape[-2:]) - math.prod(input_shape[-2:])
    return channels, _whole(math.sqrt(pixels / (grown[growing[0]] - shape[growing[0]])))  # tokens


def _whole(stride: float) -> int | None:
    return round(stride) if stride > 0 and abs(stride - round(stride)) < 0.01 * stride else None


def _static_info(shape: list[int], input_size: Sequence[int]) -> tuple[int | None, int | None]:
    """Channels and stride from the output's shape at the built size: ``[L, D]`` are tokens of D features, their
    stride the patch side of a grid of about L patches (none if that side is not near a power of two); of
    ``[C, H, W]`` and ``[H, W, C]`` the layout whose sides have the input's aspect ratio (a tie: channels first),
    the stride the power of two nearest the input's size over the map's."""
    if len(shape) == 1:
        return shape[0], None
    if len(shape) == 2:  # tokens: a patch grid (and a class token or a few) has a power of two's patches
        exponent = math.log2(math.sqrt(math.prod(input_size) / shape[0]))
        return shape[1], 2 ** round(exponent) if abs(exponent - round(exponent)) < 0.1 and exponent > -0.1 else None
    if len(shape) == 3 and len(input_size) == 2 and min(shape) >= 1:
        def off(h: int, w: int) -> float:
            return abs(math.log((h / w) / (input_size[0] / input_size[1])))
        last = off(shape[0], shape[1]) < off(shape[1], shape[2])
        channels, area = (shape[2], shape[0] * shape[1]) if last else (shape[0], shape[1] * shape[2])
    else:
        return shape[0], None
    stride = 2.0 ** round(math.log2(math.sqrt(math.prod(input_size) / area)))
    return channels, int(stride) if stride >= 1 else None


def _drop_probe_graphs(graph: nn.Module) -> None:
    """Forget the graphs the probe rebuilt at its size (graph_resize): a model keeps none it was not run at."""
    for module in graph.modules():
        sized = getattr(module, "sized", None)
        if sized is not None:
            sized.variants.clear()
