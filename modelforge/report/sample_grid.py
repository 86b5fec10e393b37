"""``samples.png``: a few test images, their targets and the model's outputs, for a task other than classify
(where the confusion matrix says more). Rows: inputs, targets, outputs; a mask in its classes' colours, an image
as gray, labels and numbers written under the input."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.report.class_colours import palette
from modelforge.report.png_file import save_png
from modelforge.tasks import Task

log = logging.getLogger(__name__)

SAMPLES_FILE = "samples.png"


def write_sample_grid(model: nn.Module, dataset: Any, task: Task, run_dir: Path, title: str = "",
                      class_names: tuple[str, ...] = (), n: int = 8) -> dict[str, str]:
    """Draw the first ``n`` samples of ``dataset`` through ``model`` to ``run_dir/samples.png``; for metrics.json.
    A picture that cannot be written is a warning, not a failure of the run."""
    count = min(n, len(dataset))
    if count == 0:
        return {}
    x, y = dataset.__getitems__(list(range(count)))
    device = next(model.parameters(), torch.zeros(())).device
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        out = model(x.to(device)).float().cpu()
    model.train(was_training)
    try:
        path = save_png(_figure(x.cpu(), y.cpu(), out, task, title, class_names), run_dir / SAMPLES_FILE)
    except OSError as exc:
        log.warning("sample grid not written: %s", exc)
        return {}
    log.info("samples: %s", path)
    return {"samples": str(path)}


def _figure(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, task: Task, title: str,
            names: tuple[str, ...]) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure


    images = task.output in ("class_map", "image")
    rows = 3 if images else 1
    fig = Figure(figsize=(1.6 * len(x), 1.7 * rows + (0.6 if not images else 0.2)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, len(x), squeeze=False)
    colours = ListedColormap([[c / 255 for c in palette()[3 * k:3 * k + 3]] for k in range(256)])
    for i in range(len(x)):
        axes[0][i].imshow(x[i, 0].numpy(), cmap="gray")
        if task.output == "class_map":
            for row, mask in ((1, y[i]), (2, out[i].argmax(0))):
                axes[row][i].imshow(mask.numpy(), cmap=colours, vmin=0, vmax=255, interpolation="nearest")
        elif task.output == "image":
            for row, picture in ((1, y[i, 0]), (2, out[i, 0].clamp(0, 1))):
                axes[row][i].imshow(picture.numpy(), cmap="gray", vmin=0, vmax=1)
        else:
            axes[0][i].set_xlabel(_words(y[i], out[i], task, names), fontsize=7)
    for row, label in enumerate(("input", "target", "output")[:rows]):
        axes[row][0].set_ylabel(label)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def _words(target: torch.Tensor, output: torch.Tensor, task: Task, names: tuple[str, ...]) -> str:
    if task.output == "labels":
        def said(flags: torch.Tensor) -> str:
            return " ".join(names[k] if k < len(names) else str(k) for k in flags.nonzero().flatten().tolist())
        return f"true {said(target > 0.5)}\npred {said(output.sigmoid() > task.threshold)}"
    return "true " + " ".join(f"{v:.3g}" for v in target.flatten().tolist()) + "\npred " + " ".join(
        f"{v:.3g}" for v in output.flatten().tolist())
