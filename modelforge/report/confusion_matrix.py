"""The confusion matrix of ``eval``: which true class the test images had, and which the model predicted.

Counted as the test runs, from the network's own logits (a forward hook: no second pass over the data), summed
over DDP ranks; drawn to ``RUN/confusion_matrix.png`` (matplotlib's Agg, imported only to draw).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from torch import Tensor, nn

from modelforge.files.write_faults import write_error_line
from modelforge.report.png_file import save_png

log = logging.getLogger(__name__)

CONFUSION_FILE = "confusion_matrix.png"


class ConfusionCounts(Callback):
    """Counts (true class, predicted class) pairs over the test set: ``counts[t, p]``."""

    def __init__(self, n_classes: int, attribute: str = "model") -> None:
        self.n_classes = n_classes
        self.attribute = attribute  # where the LightningModule keeps the network
        self.counts = torch.zeros(n_classes, n_classes, dtype=torch.long)
        self._handle: Any = None
        self._predicted: Tensor | None = None

    def _keep(self, module: nn.Module, args: Any, output: Tensor) -> None:
        if self._predicted is None:  # the test step's own forward; a hook plugin's later ones (grad_cam) are not
            self._predicted = output.detach().argmax(1)

    def on_test_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._predicted = None

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.counts = torch.zeros(self.n_classes, self.n_classes, dtype=torch.long, device=pl_module.device)
        self._handle = getattr(pl_module, self.attribute).register_forward_hook(self._keep)

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._predicted is not None:
            pairs = batch[1].to(self.counts.device) * self.n_classes + self._predicted.to(self.counts.device)
            self.counts += torch.bincount(pairs, minlength=self.n_classes ** 2).view(self.n_classes, self.n_classes)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._handle.remove()
        self.counts = trainer.strategy.reduce(self.counts, reduce_op="sum").cpu()  # every rank's images


def draw_confusion_matrix(counts: Tensor, path: Path, class_names: Sequence[str] = (), title: str = "") -> Path:
    """Write ``counts`` (true class by row, predicted by column) to ``path`` as a PNG, atomically; returns it.
    Cells are coloured by the share of their row (a class's images), and show the count."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = counts.shape[0]
    names = list(class_names) if len(class_names) == n else [str(k) for k in range(n)]
    if missing := _without_glyphs(names):  # matplotlib would warn per character and draw an empty box
        log.info("confusion matrix: classes drawn as their numbers, as the font has no glyph for %s (%s)",
                 " ".join(sorted(missing)), ", ".join(f"{k}: {name}" for k, name in enumerate(names)))
        names = [str(k) for k in range(n)]
    shares = (counts.double() / counts.sum(1, keepdim=True).clamp(min=1)).numpy()
    size = 2.0 + 0.45 * n
    fig = Figure(figsize=(size + 1.0, size), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, label="share of the true class")
    for t in range(n):
        for p in range(n):
            if counts[t, p]:
                ax.text(p, t, str(int(counts[t, p])), ha="center", va="center", fontsize=7,
                        color="white" if shares[t, p] > 0.5 else "black")
    ax.set_xticks(range(n), names, rotation=45 if max(map(len, names)) > 2 else 0, ha="right" if
                  max(map(len, names)) > 2 else "center", fontsize=7)
    ax.set_yticks(range(n), names, fontsize=7)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if title:
        ax.set_title(title, fontsize=9)
    return save_png(fig, path)


def _without_glyphs(names: Sequence[str]) -> set[str]:
    """The characters of ``names`` that matplotlib's default font cannot draw (a class named 猫)."""
    from matplotlib import font_manager

    font = font_manager.get_font(font_manager.findfont(font_manager.FontProperties()))
    return {c for name in names for c in name if not c.isspace() and font.get_char_index(ord(c)) == 0}


def write_confusion_matrix(counts: Tensor, run_dir: Path, class_names: Sequence[str] = (),
                           title: str = "") -> dict[str, Any]:
    """At eval's end: the picture in ``run_dir`` and a line saying where; for eval_metrics.json, the counts and the
    picture's path. A picture that cannot be written (a full disk) is a warning: the figures were measured."""
    record: dict[str, Any] = {"confusion_matrix": counts.tolist()}
    try:
        drawn = draw_confusion_matrix(counts, run_dir / CONFUSION_FILE, class_names, title)
    except OSError as exc:
        log.warning("confusion matrix not written: %s", write_error_line(exc))
        return record
    correct, total = int(counts.diag().sum()), int(counts.sum())
    log.info("confusion matrix: %s (%d of %d test images right)", drawn, correct, total)
    return {**record, "confusion_matrix_png": str(drawn)}
