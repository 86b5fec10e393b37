"""The run directory: where a run's config, metrics, checkpoints and logs go."""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from modelforge.atomic_io import write_text


def current_run_dir(fallback_root: str | Path = "outputs") -> Path:
    """Hydra's output dir for this job, or a fresh unique folder when called without Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    # Time plus a random suffix: two runs started in the same second never share a folder.
    # The CLI's layout (outputs/train/DATE/TIME_XXXXXX), relative to the working directory.
    run_dir = Path(fallback_root) / "train" / time.strftime("%Y-%m-%d") / f"{time.strftime('%H-%M-%S')}_{uuid.uuid4().hex[:6]}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def finite_or_none(value: Any) -> Any:
    """``value`` with every NaN/inf float replaced by None, recursively (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Strict JSON (non-finite numbers as null), written atomically."""
    write_text(path, json.dumps(finite_or_none(data), indent=2, sort_keys=True, allow_nan=False) + "\n")


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    write_text(path, yaml.safe_dump(data, sort_keys=False))


def write_setup_failure(run_dir: Path, exc: BaseException, record: dict[str, Any]) -> None:
    """``metrics.json`` of a run that failed before training: status, error, and nothing else.

    Rank 0 only (other DDP ranks run the same checks and fail alike); it never replaces a
    ``metrics.json`` that is already there, and never creates ``run_dir``: a run that fails
    before training leaves no run directory, or one whose ``metrics.json`` says why.
    """
    from pytorch_lightning.utilities.rank_zero import rank_zero_only

    if getattr(rank_zero_only, "rank", 0) != 0 or not run_dir.is_dir() or (run_dir / "metrics.json").exists():
        return
    write_json(run_dir / "metrics.json", {"status": "failed", "stage": "setup",
                                          "error": f"{type(exc).__name__}: {exc}", **record})
