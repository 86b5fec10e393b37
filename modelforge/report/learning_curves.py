"""Learning curves: ``RUN/learning_curves.png``, drawn once a run has trained, from what it logged to
``RUN/logs/metrics.csv`` (``logger=csv``, the default): the loss (training steps, training and validation epochs),
the accuracy (training and validation epochs) and the learning rate of each param group, against the step, with
the epochs on the top axis. Nothing here runs during training; matplotlib (Agg) is imported only to draw.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelforge.files.write_faults import write_error_line
from modelforge.report.png_file import save_png

log = logging.getLogger(__name__)

CURVES_FILE = "learning_curves.png"
METRICS_CSV = Path("logs") / "metrics.csv"  # where the run's CSVLogger writes (callbacks.check_loggers)
LR_PREFIX = "lr-"  # LearningRateMonitor's columns: lr-Adam, lr-Adam/encoder.*


@dataclass
class Logged:
    """The series of a metrics.csv: each column's (step, value) points, and the step each epoch ended at."""

    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    epoch_ends: dict[int, int] = field(default_factory=dict)  # epoch (0-based) -> the step at its end

    def points(self, name: str) -> tuple[list[int], list[float]]:
        pairs = self.series.get(name, [])
        return [s for s, _ in pairs], [v for _, v in pairs]

    def lr_columns(self) -> list[str]:
        return sorted(name for name in self.series if name.startswith(LR_PREFIX))


def read_metrics_csv(path: Path) -> Logged:
    """The finite values of ``path``'s columns, by the steps taken when they were logged (Lightning's ``step`` column
    counts from 0: a value logged at the end of the fifth step has step 4); one row per log call, others blank."""
    logged = Logged()
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            step = _number(row.get("step"))
            if step is None:
                continue
            step += 1
            for name, text in row.items():
                value = _number(text)
                if name not in ("epoch", "step") and value is not None:
                    logged.series.setdefault(name, []).append((int(step), value))
            epoch = _number(row.get("epoch"))
            if epoch is not None and _number(row.get("train/loss_epoch")) is not None:
                logged.epoch_ends[int(epoch)] = int(step)
    return logged


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _epoch_axis(epoch_ends: dict[int, int]) -> tuple[list[float], list[float]] | None:
    """Steps and epochs, to convert one into the other: epoch e + 1 at the step epoch e (0-based) ended, and the
    run's first epoch's start (step 0, or for a resumed run one epoch's steps before its first end); None if
    no epoch ended."""
    ends = sorted(epoch_ends.items())
    if not ends:
        return None
    first, first_end = ends[0]
    start = 0.0 if first == 0 else first_end - first_end / (first + 1)  # a resumed run: epochs of equal length
    steps, epochs = [start], [float(first)]
    for epoch, step in ends:
        if step > steps[-1]:  # strictly rising
            steps.append(float(step))
            epochs.append(float(epoch + 1))
    return (steps, epochs) if len(steps) > 1 else None


def _linear(xs: list[float], ys: list[float]) -> Callable[[Any], Any]:
    """Piecewise-linear through (xs, ys), rising, and on past both ends along the end pieces: a secondary axis
    needs a mapping it can invert over the whole plot, margins included (np.interp alone is flat there)."""
    import numpy as np

    def mapped(x: Any) -> Any:
        x = np.asarray(x, dtype=float)
        low = ys[0] + (x - xs[0]) * (ys[1] - ys[0]) / (xs[1] - xs[0])
        high = ys[-1] + (x - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return np.where(x < xs[0], low, np.where(x > xs[-1], high, np.interp(x, xs, ys)))

    return mapped


def draw_learning_curves(logged: Logged, path: Path, title: str = "", metric: str = "acc") -> Path:
    """Write ``logged``'s curves to ``path`` (a PNG, atomically); returns ``path``. ``metric``: the task's main
    metric, drawn beside the loss (``acc``: a classifier's accuracy)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [("loss", ("train/loss_step", "train/loss_epoch", "val/loss")),
              ("accuracy" if metric == "acc" else metric, (f"train/{metric}", f"val/{metric}"))]
    if lrs := logged.lr_columns():
        panels.append(("learning rate", tuple(lrs)))
    fig = Figure(figsize=(4.2 * len(panels), 3.4))
    FigureCanvasAgg(fig)
    axis = _epoch_axis(logged.epoch_ends)
    for ax, (label, names) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        for name in names:
            steps, values = logged.points(name)
            if not steps:
                continue
            per_step = name.endswith("_step") or name.startswith(LR_PREFIX)
            ax.plot(steps, values, label=name.removeprefix(LR_PREFIX) if label == "learning rate" else name,
                    linewidth=0.8 if per_step else 1.5, alpha=0.6 if name.endswith("_step") else 1.0,
                    marker=None if per_step else "o", markersize=4)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        if axis is not None:
            steps, epochs = axis
            top = ax.secondary_xaxis("top", functions=(_linear(steps, epochs), _linear(epochs, steps)))
            top.set_xlabel("epoch")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(left=0.22 / len(panels), right=0.98, bottom=0.15, top=0.78, wspace=0.3)  # room for both axes
    return save_png(fig, path)


def learning_curves(run_dir: Path, title: str = "", metric: str = "acc") -> Path | None:
    """Draw ``run_dir``'s learning curves from its metrics.csv; None when it has none (no ``logger=csv``)."""
    source = run_dir / METRICS_CSV
    if not source.is_file():
        return None
    return draw_learning_curves(read_metrics_csv(source), run_dir / CURVES_FILE, title, metric)


def write_learning_curves(run_dir: Path, title: str = "", loggers_off: str | None = None,
                          metric: str = "acc") -> dict[str, str]:
    """At a run's end: draw its learning curves and say where (``learning_curves: PATH``), or why not; a picture
    that cannot be written (a full disk) is a warning, not a failure of the run that trained. For metrics.json.
    ``loggers_off``: why the run logged nothing, when something turned its loggers off (``trainer.fast_dev_run``)."""
    if loggers_off is not None:
        log.info("learning curves: none drawn, as %s", loggers_off)
        return {}
    try:
        drawn = learning_curves(run_dir, title, metric)
    except OSError as exc:
        log.warning("learning curves not written: %s", write_error_line(exc))
        return {}
    if drawn is None:
        log.info("learning curves: none drawn, as the run kept no %s (logger=csv writes it)", METRICS_CSV)
        return {}
    log.info("learning curves: %s", drawn)
    return {"learning_curves": str(drawn)}
