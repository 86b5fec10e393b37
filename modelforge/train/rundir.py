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
    run_dir = Path(fallback_root) / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{uuid.uuid4().hex[:6]}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def write_atomic(path: Path, text: str) -> None:
    """Write through a temp file in the same folder, fsync and rename: never half a file."""
    write_text(path, text)


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
    write_atomic(path, json.dumps(finite_or_none(data), indent=2, sort_keys=True, allow_nan=False) + "\n")


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))
