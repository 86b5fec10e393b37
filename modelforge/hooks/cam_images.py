"""Grad-CAM grids as PNG: for each image, the image, its heatmap and the two overlaid (matplotlib Agg).

matplotlib is imported lazily, only when an image is written. The file is written
to a temporary name in the same directory and renamed, so a reader never sees
half a PNG and an interrupted run leaves the earlier file as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection
from pathlib import Path

from torch import Tensor


def save_cam_grid(images: Tensor, heatmaps: Tensor, predicted: Tensor, labels: Tensor | None, path: Path,
                  title: str = "", blank: Collection[int] = ()) -> Path:
    """Write one row per image (image | heatmap | overlay) to ``path``; titles give predicted and true class, and
    say which heatmaps are ``blank`` (all zero)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    images = images.detach().float().cpu()
    heatmaps = heatmaps.detach().float().cpu()
    n = images.shape[0]
    fig = Figure(figsize=(5.4, 1.8 * n + 0.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(n, 3, squeeze=False)
    for i in range(n):
        image = images[i].mean(dim=0).numpy()  # channels averaged: MNIST has one
        true = f", true {int(labels[i])}" if labels is not None else ""
        heatmap = "heatmap: blank (all zero)" if i in blank else "heatmap"
        panels = ((image, "gray", f"pred {int(predicted[i])}{true}"), (heatmaps[i].numpy(), "jet", heatmap))
        for ax, (data, cmap, text) in zip(axes[i], panels):
            ax.imshow(data, cmap=cmap)
            ax.set_title(text, fontsize=8)
        axes[i, 2].imshow(image, cmap="gray")
        axes[i, 2].imshow(heatmaps[i].numpy(), cmap="jet", alpha=0.45)
        axes[i, 2].set_title("overlay", fontsize=8)
        for ax in axes[i]:
            ax.set_axis_off()
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=80)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a PNG is as readable as any other output
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
