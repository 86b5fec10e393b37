"""A matplotlib figure written as a PNG file: drawn in memory first, so the write knows its size (a full disk
says how much the picture needs and how much is free) and is atomic (never half a PNG)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from modelforge.files.atomic import write_bytes


def save_png(fig: Any, path: Path, dpi: int = 100) -> Path:
    """Write ``fig`` (a matplotlib Figure with a canvas) to ``path``; returns ``path``."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format="png")
    write_bytes(path, buffer.getbuffer())
    return path
