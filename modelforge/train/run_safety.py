"""The callbacks that make a run stop cleanly and resume exactly (wired into every training Trainer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytorch_lightning.callbacks import Callback

from modelforge.errors import ConfigError
from modelforge.train.divergence import DivergenceGuard
from modelforge.train.resume_state import ResumeState


def divergence_bound(config: Mapping[str, Any]) -> float | None:
    """``divergence.max_loss``, checked: None or a number > 0."""
    divergence = dict(config.get("divergence") or {})
    unknown = set(divergence) - {"max_loss"}
    if unknown:
        raise ConfigError(f"divergence.{sorted(unknown)[0]}", "unknown option", allowed="max_loss")
    max_loss = divergence.get("max_loss")
    if max_loss is not None and (isinstance(max_loss, bool) or not isinstance(max_loss, (int, float)) or max_loss <= 0):
        raise ConfigError("divergence.max_loss", f"got {max_loss!r}", allowed="null or a number > 0")
    return max_loss


def run_safety_callbacks(config: Mapping[str, Any]) -> list[Callback]:
    """DivergenceGuard (``divergence.max_loss``) and ResumeState."""
    return [DivergenceGuard(divergence_bound(config), config), ResumeState()]
