"""Running a command as a Hydra app, with modelforge's errors printed cleanly."""

from __future__ import annotations

import functools
import sys
import uuid
from collections.abc import Callable
from typing import Any

import hydra
from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf

from modelforge.errors import ModelforgeError
from modelforge.paths import conf_dir

EXIT_CONFIG_ERROR = 2


def _register_resolvers() -> None:
    # A per-process suffix for run directories: two launches in the same second never collide.
    if not OmegaConf.has_resolver("mf_uid"):
        OmegaConf.register_new_resolver("mf_uid", lambda: uuid.uuid4().hex[:6], use_cache=True)


def is_multirun() -> bool:
    """True inside a job launched by ``-m`` (a sweep)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class SweepJobError(CompactHydraException):
    """A ModelforgeError in a sweep job. Hydra prints this kind as one message, no traceback."""


def report_errors(task: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """Print a ModelforgeError as one clear message and exit non-zero, without a traceback.

    In a sweep the error is re-raised instead, so Hydra marks that one job failed
    and the others still run.
    """

    @functools.wraps(task)
    def wrapper(cfg: DictConfig) -> Any:
        from modelforge.stops import RunStopped

        try:
            return task(cfg)
        except RunStopped as exc:  # terminated, interrupted, diverged: each has its exit code
            print(f"error: {exc}", file=sys.stderr)
            if is_multirun() and not exc.ends_sweep:
                raise SweepJobError(f"{type(exc).__name__}: {exc}") from exc
            raise SystemExit(exc.exit_code) from None
        except ModelforgeError as exc:
            if is_multirun():
                # Still a failure for Hydra (the sweep's summary records it), but one that
                # Hydra prints without a traceback when it re-raises it after the batch.
                raise SweepJobError(f"{type(exc).__name__}: {exc}") from exc
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(getattr(exc, "exit_code", EXIT_CONFIG_ERROR)) from None

    return wrapper


def run_hydra(task: Callable[[DictConfig], Any], config_name: str, argv: list[str], prog: str) -> Any:
    """Run ``task`` as a Hydra app over ``argv`` (overrides and Hydra flags)."""
    _register_resolvers()
    # Hydra parses sys.argv itself; hand it only what follows the subcommand.
    saved = sys.argv
    sys.argv = [prog, *argv]

    @functools.wraps(task)
    def with_full_argv(cfg: DictConfig) -> Any:
        # Lightning's DDP launcher re-runs sys.argv in child processes: give it the subcommand back.
        sys.argv = saved
        if not is_multirun():
            return task(cfg)
        # In a sweep, DDP children must run this one job, and the next job needs a clean slate.
        from modelforge.sweep.ddp import fresh_ddp_state, sweep_job_argv

        sys.argv = sweep_job_argv(saved[: len(saved) - len(argv)])
        with fresh_ddp_state():
            return task(cfg)

    try:
        main = hydra.main(config_path=str(conf_dir()), config_name=config_name, version_base="1.3")
        result = main(report_errors(with_full_argv))()
        from modelforge.sweep.callback import exit_if_jobs_failed

        exit_if_jobs_failed()  # a sweep that went on past failed jobs (Optuna) still fails the command
        return result
    except BaseException:
        # Hydra stops a sweep at its first failed job without calling the callbacks'
        # on_multirun_end: print the summary table that the finished jobs left.
        from modelforge.sweep.callback import report_unfinished_sweeps

        report_unfinished_sweeps()
        raise
    finally:
        sys.argv = saved
