"""``python -m modelforge train ...``: the Hydra task around :func:`modelforge.train.train`."""

from __future__ import annotations

from omegaconf import DictConfig


def train_task(cfg: DictConfig) -> float:
    """Train one configuration; the returned metric is what sweepers optimize."""
    from modelforge.cli.run_checks import take_validated
    from modelforge.train import train

    return train(take_validated(cfg))  # checked before Hydra made the run directory
