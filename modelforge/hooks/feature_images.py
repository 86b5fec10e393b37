"""Feature-map grids as PNG: the channels of one sample, tiled, drawn with matplotlib's Agg.

matplotlib is imported here, lazily, only when an image is written; a bare
``Figure`` on an Agg canvas leaves pyplot's global backend and figures alone.
"""

from __future__ import annotations

import math
from pathlib import Path

from torch import Tensor

MAX_CHANNELS = 64  # an 8x8 grid stays legible; wider layers show their first 64 channels


def save_feature_grid(maps: Tensor, path: Path, title: str = "") -> Path:
    """Write ``maps`` of shape (channels, height, width) as a grid of images to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if maps.dim() != 3:
        raise ValueError(f"expected feature maps of shape (C, H, W), got {list(maps.shape)}")
    maps = maps[:MAX_CHANNELS].detach().float().cpu()
    n = maps.shape[0]
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(1.3 * cols, 1.3 * rows + 0.4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.set_axis_off()
        if i < n:
            ax.imshow(maps[i].numpy(), cmap="viridis")
            ax.set_title(str(i), fontsize=6)
    if title:
        fig.suptitle(title, fontsize=8)
    from modelforge.atomic_io import write_with

    write_with(path, lambda handle: fig.savefig(handle, dpi=80, format="png"))  # never half a PNG
    return path
