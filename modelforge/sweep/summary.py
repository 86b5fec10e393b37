"""The table of a sweep's jobs, one row per job's ``metrics.json``: ``summary.csv`` and ``summary.md``.

Rows run best first by the monitored metric (ascending for a ``*loss`` monitor), then the pruned trials of an Optuna
search (by their last value), then jobs without a value. A search of several objectives gets a column for each
and a ``pareto`` column marking the jobs no other finished job beats in every objective.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from modelforge.files.atomic import write_text

METRICS_FILE = "metrics.json"
METRIC_COLUMNS = ("val/acc", "test/acc", "params", "train_time_s")  # after the monitored metric(s)
SUCCEEDED = ("finished", "pruned")  # a job stopped by its search's pruner did what it was asked


@dataclass
class JobRow:
    """One job: its directory (relative to the sweep dir) and what its ``metrics.json`` says."""

    job: str
    metrics: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = str(self.metrics.get("status", "unknown"))
        self.overrides = [str(o) for o in self.metrics.get("overrides") or []]
        self.monitor = str(self.metrics.get("monitor") or "val/acc")
        self.error = str(self.metrics.get("error") or "")


def read_rows(sweep_dir: str | Path) -> list[JobRow]:
    """A row per ``metrics.json`` below ``sweep_dir``, at any depth (``hydra.sweep.subdir`` may nest), but in hidden
    folders."""
    rows = []
    for path in sorted(Path(sweep_dir).glob(f"*/**/{METRICS_FILE}")):
        if any(part.startswith(".") for part in path.relative_to(sweep_dir).parts):
            continue  # a resumed job's earlier attempt (.attempts/), submitit's logs
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # a half-written or foreign file: still show the job
            metrics = {"status": "unreadable", "error": f"{path.name}: {exc}"}
        rows.append(JobRow(path.parent.relative_to(sweep_dir).as_posix(), metrics))
    return rows


def sort_rows(rows: Sequence[JobRow]) -> list[JobRow]:
    """Best monitored value first, then pruned rows by their last value; rows without one (failed, running, NaN)
    last, in job order."""
    from modelforge.tasks import metric_mode  # smaller is better for a loss or an error (val/mae)

    def key(row: JobRow) -> tuple:
        value = row.metrics.get(row.monitor)
        valued = row.status in SUCCEEDED and _number(value) is not None
        group = (0 if row.status == "finished" else 1) if valued else 2
        best_first = (value if metric_mode(row.monitor) == "min" else -value) if valued else 0.0
        job_order = [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", row.job)]  # 2 before 10
        return (group, best_first, job_order)

    return sorted(rows, key=key)


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    return float(value) if ok else None


def pareto_front(rows: Sequence[JobRow], objectives: Sequence[tuple[str, str]]) -> set[str]:
    """The jobs of finished rows that no other finished row dominates: as good in every objective
    (``(name, "maximize" | "minimize")``), better in one."""
    signs = [1.0 if direction == "maximize" else -1.0 for _, direction in objectives]
    points = {}
    for row in rows:
        values = [_number(row.metrics.get(name)) for name, _ in objectives]
        if row.status == "finished" and None not in values:
            points[row.job] = [sign * value for sign, value in zip(signs, values)]

    def dominates(a: list[float], b: list[float]) -> bool:
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return {job for job, p in points.items() if not any(dominates(q, p) for q in points.values())}


def swept_overrides(rows: Sequence[JobRow], fixed: Sequence[str]) -> list[list[str]]:
    """Each row's overrides less those of keys that ``fixed`` (the sweep's command line) does not sweep."""
    same = {o.get_key_element() for o in OverridesParser.create().parse_overrides(list(fixed)) if not o.is_sweep_override()}
    swept = [[o for o in row.overrides if o.split("=", 1)[0] not in same] for row in rows]
    # A "sweep" of one value per key varied nothing: show what the jobs ran with instead.
    return swept if any(swept) else [row.overrides for row in rows]


def short_floats(text: str) -> str:
    """Long decimals (Optuna's learning rates) to 4 significant digits, for the tables only."""
    return re.sub(r"\d+\.\d{5,}(?:e-?\d+)?", lambda m: f"{float(m.group()):.4g}", text)


def one_line(text: str) -> str:
    """A multi-line error (ConfigError's hints) as one table cell: lines joined by "; ", or " " after a colon."""
    cell = ""
    for line in filter(None, (line.strip() for line in text.splitlines())):
        cell += (" " if cell.endswith(":") else "; " if cell else "") + line
    return cell


def table(rows: Sequence[JobRow], fixed: Sequence[str], full: bool = False,
          objectives: Sequence[tuple[str, str]] = ()) -> list[list[str]]:
    """Header and cells, sorted, with the swept overrides of each job.

    ``full`` (the CSV): raw values, whole errors, and every override and the run dir of each job;
    otherwise rounded values, one-line errors, and no error column when no job has one.
    ``objectives``: an Optuna search's, with their directions; several get a ``pareto`` column.
    """
    rows = sort_rows(rows)
    monitors = sorted({row.monitor for row in rows}) or ["val/acc"]
    monitors += [name for name, _ in objectives if name not in monitors]
    front = pareto_front(rows, objectives) if len(objectives) > 1 else None
    header = ["job", "status", *(["pareto"] if front is not None else []), *monitors,
              *(c for c in METRIC_COLUMNS if c not in monitors), "overrides", "error"]
    if full:
        header += ["all_overrides", "run_dir"]
    elif not any(row.error for row in rows):
        header.remove("error")
    lines = [header]
    for row, swept in zip(rows, swept_overrides(rows, fixed)):
        cells = {"job": row.job, "status": row.status, "all_overrides": " ".join(row.overrides),
                 "pareto": "yes" if front and row.job in front else "",
                 "overrides": " ".join(swept) if full else short_floats(" ".join(swept)),
                 "error": row.error if full else one_line(row.error)}
        lines.append([cells[c] if c in cells else _cell(row.metrics.get(c), c, full) for c in header])
    return lines


def _cell(value: Any, column: str, full: bool) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not full:
        return f"{value:.1f}" if column.endswith("_s") else f"{value:.4f}"
    return str(value)


def format_text(rows: Sequence[JobRow], fixed: Sequence[str], objectives: Sequence[tuple[str, str]] = ()) -> str:
    """A fixed-width table for the console."""
    lines = table(rows, fixed, objectives=objectives)
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    lines.insert(1, ["-" * w for w in widths])
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)


def format_markdown(rows: Sequence[JobRow], fixed: Sequence[str], objectives: Sequence[tuple[str, str]] = ()) -> str:
    """A GitHub-flavoured markdown table."""
    lines = table(rows, fixed, objectives=objectives)
    lines.insert(1, ["---"] * len(lines[0]))
    return "".join("| " + " | ".join(v.replace("|", "\\|") for v in line) + " |\n" for line in lines)


def write_summary(sweep_dir: str | Path, rows: Sequence[JobRow], fixed: Sequence[str],
                  objectives: Sequence[tuple[str, str]] = ()) -> None:
    """Atomically (re)write ``summary.csv`` (full precision, whole errors, every override) and ``summary.md``."""
    csv_text = io.StringIO()
    csv.writer(csv_text, lineterminator="\n").writerows(table(rows, fixed, full=True, objectives=objectives))
    write_text(Path(sweep_dir) / "summary.csv", csv_text.getvalue())
    write_text(Path(sweep_dir) / "summary.md", format_markdown(rows, fixed, objectives))
