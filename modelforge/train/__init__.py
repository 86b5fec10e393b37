"""Training with Lightning. ``import modelforge`` loads only ``train.optim`` and ``train.records``
from here (no Lightning); ``train``, ``evaluate`` and ``ClassifierModule`` load it on first use."""

from __future__ import annotations

from typing import Any

__all__ = ["ClassifierModule", "evaluate", "train"]


def __getattr__(name: str) -> Any:
    if name == "ClassifierModule":
        from modelforge.train.module import ClassifierModule

        return ClassifierModule
    if name in ("train", "evaluate"):
        from modelforge.train import run

        return getattr(run, name)
    raise AttributeError(f"module 'modelforge.train' has no attribute {name!r}")
