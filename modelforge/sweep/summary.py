"""The table of a sweep's jobs, built from each job's own ``metrics.json``.

One row per job directory of the sweep; rows are sorted by the monitored metric
(best first: descending, or ascending for a ``*loss`` monitor), failed jobs last.
The table is written as ``summary.csv`` (every field) and ``summary.md``.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelforge.train.records import write_text

METRICS_FILE = "metrics.json"
# Columns after the monitored metric; the monitor itself comes first (see `columns`).
METRIC_COLUMNS = ("val/acc", "test/acc", "params", "train_time_s")


@dataclass
class JobRow:
    """One sweep job: where it ran, what it overrode, and what it measured."""

    job: str
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return str(self.metrics.get("status", "unknown"))

    @property
    def overrides(self) -> list[str]:
        return [str(o) for o in self.metrics.get("overrides") or []]

    @property
    def monitor(self) -> str:
        return str(self.metrics.get("monitor") or "val/acc")

    @property
    def error(self) -> str:
        return str(self.metrics.get("error") or "")


def read_rows(sweep_dir: str | Path) -> list[JobRow]:
    """A row for each ``sweep_dir/*/metrics.json`` (any depth, as ``hydra.sweep.subdir`` may nest)."""
    sweep_dir = Path(sweep_dir)
    rows = []
    for path in sorted(sweep_dir.rglob(METRICS_FILE)):
        if path.parent == sweep_dir:
            continue
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # a half-written or foreign file: still show the job
            metrics = {"status": "unreadable", "error": f"{path.name}: {exc}"}
        rows.append(JobRow(job=path.parent.relative_to(sweep_dir).as_posix(), metrics=metrics))
    return rows


def _job_key(job: str) -> tuple:
    # Natural order: job 2 before job 10.
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in job.replace("_", "/").split("/"))


def sort_rows(rows: Sequence[JobRow]) -> list[JobRow]:
    """Best monitored value first; jobs without a value (failed, running) last, in job order."""

    def key(row: JobRow) -> tuple:
        value = row.metrics.get(row.monitor)
        if row.status != "finished" or not isinstance(value, (int, float)) or math.isnan(value):
            return (1, 0.0, _job_key(row.job))
        best_first = value if row.monitor.endswith("loss") else -value
        return (0, best_first, _job_key(row.job))

    return sorted(rows, key=key)


def swept_overrides(rows: Sequence[JobRow], fixed: Sequence[str] | None = None) -> list[list[str]]:
    """Each row's overrides less the fixed ones: what the sweep chose for that job.

    ``fixed`` are the sweep's own command-line overrides (a job's ``enc_sizes=[16]`` is not
    among them, its ``model=cnn`` is); without them, overrides shared by every row count as fixed.
    """
    if fixed is None:
        fixed = list(set.intersection(*(set(row.overrides) for row in rows))) if len(rows) > 1 else []
    same = {canonical(o) for o in fixed}
    swept = [[o for o in row.overrides if canonical(o) not in same] for row in rows]
    # A "sweep" of one value per key varied nothing: show what the jobs ran with instead.
    return swept if any(swept) else [row.overrides for row in rows]


@functools.lru_cache(maxsize=4096)
def canonical(override: str) -> str:
    """``key=value`` as Hydra reads it: the command line's ``x=true`` and the job's ``x=True`` agree."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides([override])[0]
        if parsed.is_sweep_override():
            return override
        return f"{parsed.get_key_element()}={parsed.get_value_element_as_str()}"
    except HydraException:
        return override


def short_floats(text: str) -> str:
    """Long decimals (Optuna's learning rates) to 4 significant digits, for the tables only."""
    return re.sub(r"\d+\.\d{5,}(?:e-?\d+)?", lambda m: f"{float(m.group()):.4g}", text)


def columns(rows: Sequence[JobRow]) -> list[str]:
    """job, status, the monitored metric(s), the usual metrics, overrides, error."""
    monitors = sorted({row.monitor for row in rows}) or ["val/acc"]
    metrics = [*monitors, *(c for c in METRIC_COLUMNS if c not in monitors)]
    return ["job", "status", *metrics, "overrides", "error"]


def one_line(text: str) -> str:
    """A multi-line error (ConfigError's hints) as one table cell."""
    cell = ""
    for line in (line.strip() for line in text.splitlines()):
        if line:
            # "failed:" introduces the lines below it: no "; " after a colon.
            cell += (" " if cell.endswith(":") else "; " if cell else "") + line
    return cell


def _cell(value: Any, column: str = "") -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.1f}" if column.endswith("_s") else f"{value:.4f}"
    return str(value)


def table_rows(rows: Sequence[JobRow], fixed: Sequence[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells, sorted; the overrides cell holds only the swept ones.

    The error column is left out when no job has an error.
    """
    ordered = sort_rows(rows)
    header = [c for c in columns(ordered) if c != "error" or any(row.error for row in ordered)]
    cells = []
    for row, swept in zip(ordered, swept_overrides(ordered, fixed)):
        values = {"job": row.job, "status": row.status, "overrides": short_floats(" ".join(swept)),
                  "error": one_line(row.error)}
        cells.append([values[c] if c in values else _cell(row.metrics.get(c), c) for c in header])
    return header, cells


def format_text(rows: Sequence[JobRow], fixed: Sequence[str] | None = None) -> str:
    """A fixed-width table for the console."""
    header, cells = table_rows(rows, fixed)
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in [header, *cells]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_markdown(rows: Sequence[JobRow], fixed: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured markdown table."""
    header, cells = table_rows(rows, fixed)

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(c) for c in cells)]) + "\n"


def format_csv(rows: Sequence[JobRow], fixed: Sequence[str] | None = None) -> str:
    """CSV with full precision, the full error text and every override of each job."""
    ordered = sort_rows(rows)
    header = columns(ordered)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*header, "all_overrides", "run_dir"])
    for row, swept in zip(ordered, swept_overrides(ordered, fixed)):
        values = {"job": row.job, "status": row.status, "overrides": " ".join(swept), "error": row.error}
        writer.writerow([*(values[c] if c in values else row.metrics.get(c, "") for c in header),
                         " ".join(row.overrides), row.metrics.get("run_dir", "")])
    return out.getvalue()


def write_summary(sweep_dir: str | Path, fixed: Sequence[str] | None = None,
                  extra: Callable[[list[JobRow]], list[JobRow]] | None = None) -> list[JobRow]:
    """(Re)write ``summary.csv`` and ``summary.md`` in ``sweep_dir``; return the rows.

    ``extra`` adds rows for jobs that left no directory (those a stopped sweep never ran).
    """
    sweep_dir = Path(sweep_dir)
    rows = read_rows(sweep_dir)
    rows += extra(rows) if extra is not None else []
    write_text(sweep_dir / "summary.csv", format_csv(rows, fixed))
    write_text(sweep_dir / "summary.md", format_markdown(rows, fixed))
    return rows
