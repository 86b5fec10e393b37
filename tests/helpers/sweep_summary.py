"""A sweep's summary.csv, read back as rows."""

from __future__ import annotations

import csv
from pathlib import Path


def read_summary(sweep_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((sweep_dir / "summary.csv").read_text().splitlines(keepends=True)))
