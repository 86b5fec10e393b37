"""A small tmpfs mounted on a folder: a real full disk for the tests that need one (root on Linux)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {result.stderr.strip()}")
