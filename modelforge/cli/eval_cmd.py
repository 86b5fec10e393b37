"""``python -m modelforge eval ckpt_path=...``: test metrics of a saved checkpoint."""

from __future__ import annotations

from omegaconf import DictConfig


def eval_task(cfg: DictConfig) -> dict[str, float]:
    """Rebuild the model from the checkpoint's stored config and test it."""
    from modelforge.train import evaluate

    return evaluate(cfg)
