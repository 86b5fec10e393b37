"""The short table a run prints at its end: its validation and test figures, epochs, time and size."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def format_metrics(metrics: Mapping[str, Any], run_dir: Path) -> str:
    """The short table printed at the end of a run."""
    rows = [(k, f"{v:.4f}" if isinstance(v, float) else str(v)) for k, v in sorted(metrics.items())
            if k.startswith(("val/", "test/", "best_")) or k in ("epochs", "train_time_s", "params", "ckpt_path")]
    width = max((len(k) for k, _ in rows), default=0)
    rule = "-" * (width + 14)
    return "\n".join([rule, *[f"{k.ljust(width)}  {v}" for k, v in rows], rule, f"run directory: {run_dir}"])
