"""The run directory: where a run's config, metrics, checkpoints and logs go."""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml


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
    """Write through a temp file and rename, so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))
