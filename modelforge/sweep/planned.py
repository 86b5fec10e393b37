"""The jobs a basic (grid) sweep will run, so a sweep that stops early can name those that never ran."""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import DictConfig

from modelforge.sweep.summary import JobRow

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
NOT_RUN = "not run"


def planned_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, in job-number order, as Hydra's BasicSweeper will launch them.

    None for other sweepers (Optuna draws its trials as it goes) or when the overrides need
    Hydra's config loader to expand (``glob(*)``).
    """
    sweeper = config.hydra.sweeper
    if sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    arguments = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    arguments += [str(o) for o in config.hydra.overrides.task]
    try:
        overrides = OverridesParser.create().parse_overrides(arguments)
        batches = BasicSweeper.split_arguments(overrides, None)
    except (HydraException, ValueError, TypeError):
        return None
    return [list(job) for batch in batches for job in batch]


def not_run_rows(planned: Sequence[Sequence[str]] | None, rows: Sequence[JobRow], monitor: str | None) -> list[JobRow]:
    """A ``not run`` row for every planned job that left no ``metrics.json``."""
    if not planned:
        return []
    seen = {row.job.split("_", 1)[0] for row in rows}
    return [JobRow(job=str(num), metrics={"status": NOT_RUN, "overrides": list(overrides), "monitor": monitor,
                                          "error": "never ran: the sweep stopped before it"})
            for num, overrides in enumerate(planned) if str(num) not in seen]
