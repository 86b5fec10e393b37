"""Running a command as a Hydra app: Hydra composes once, and its config errors become one message."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import hydra
from hydra._internal.utils import run_and_report
from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf

from modelforge.cli.command_line import CommandLine
from modelforge.cli.hydra_errors import config_error
from modelforge.cli.run_checks import ConfigRefused, forget_validated
from modelforge.config import conf_dir
from modelforge.errors import ModelforgeError

EXIT_CONFIG_ERROR = 2
FULL_ERROR = "HYDRA_FULL_ERROR"


# Config groups that ConfigStore fills with generated defaults (model_defaults/cnn, hook_defaults/verbose):
# the shipped configs start from them; a user picks from model/ and hooks/.
INTERNAL_GROUP_SUFFIX = "_defaults"


def _register_resolvers() -> None:
    # A per-process suffix for run directories: two launches in the same second never collide.
    if not OmegaConf.has_resolver("mf_uid"):
        OmegaConf.register_new_resolver("mf_uid", lambda: uuid.uuid4().hex[:6], use_cache=True)
    if not OmegaConf.has_resolver("mf_config_groups"):
        OmegaConf.register_new_resolver("mf_config_groups", user_config_groups)


def user_config_groups() -> str:
    """The config groups of ``--help`` (conf/, ``--config-dir``, ConfigStore), as Hydra lists them,
    without Hydra's own groups and the internal ``*_defaults`` ones."""
    from hydra.core.global_hydra import GlobalHydra

    def listed(group: str) -> bool:
        return not (group == "hydra" or group.startswith("hydra/") or group.endswith(INTERNAL_GROUP_SUFFIX))

    return GlobalHydra.instance().hydra.format_config_groups(listed)


def is_multirun() -> bool:
    """True inside a job launched by ``-m`` (a sweep)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class SweepJobError(CompactHydraException):
    """A ModelforgeError in a sweep job. Hydra prints this kind as one message, no traceback."""


def report_errors(task: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """A ModelforgeError of the task goes up to :func:`run_hydra`, which prints it.

    In a sweep it becomes a one-line Hydra error instead: Hydra marks that one job
    failed and the others still run.
    """

    @functools.wraps(task)
    def wrapper(cfg: DictConfig) -> Any:
        from modelforge.train.stopping import RunStopped

        try:
            return task(cfg)
        except RunStopped as exc:  # terminated, interrupted, diverged: each has its exit code
            print(f"error: {exc}", file=sys.stderr)
            if is_multirun() and not exc.ends_sweep:
                raise SweepJobError(f"{type(exc).__name__}: {exc}") from exc
            raise SystemExit(exc.exit_code) from None
        except ModelforgeError as exc:
            if not is_multirun():
                # A SystemExit passes Hydra's job bookkeeping, which would log a traceback-like line.
                raise ConfigRefused(exc) from None
            # Still a failure for Hydra (the sweep's summary records it), but one that
            # Hydra prints without a traceback when it re-raises it after the batch.
            raise SweepJobError(f"{type(exc).__name__}: {exc}") from exc

    return wrapper


@contextlib.contextmanager
def _hydra_raises(user_value: str | None) -> Iterator[Callable[[], contextlib.AbstractContextManager]]:
    """Have Hydra raise its errors instead of printing them (its documented HYDRA_FULL_ERROR=1).

    Yields a context manager that gives the task the user's own setting back, so the
    job and the processes it starts (DDP ranks) see the environment they were given.
    """

    def set_to(value: str | None) -> None:
        if value is None:
            os.environ.pop(FULL_ERROR, None)
        else:
            os.environ[FULL_ERROR] = value

    @contextlib.contextmanager
    def users_setting() -> Iterator[None]:
        set_to(user_value)
        try:
            yield
        finally:
            set_to("1")

    set_to("1")
    try:
        yield users_setting
    finally:
        set_to(user_value)


def _reraise(exc: BaseException) -> None:
    raise exc


def run_hydra(task: Callable[[DictConfig], Any], config_name: str, argv: list[str], prog: str) -> int:
    """Run ``task`` as a Hydra app over ``argv`` (overrides and Hydra flags); return the exit code.

    Hydra composes the config once. A config problem, from Hydra, OmegaConf or
    modelforge, is one ``error:`` message and exit code 2; anything else is
    reported by Hydra as usual.
    """
    _register_resolvers()
    cmd = CommandLine.parse(argv, config_name)
    user_full_error = os.environ.get(FULL_ERROR)
    # Hydra parses sys.argv itself; hand it only what follows the subcommand.
    saved = sys.argv
    sys.argv = [prog, *argv]
    try:
        with _hydra_raises(user_full_error) as users_setting:
            cmd.check_user_yaml()
            cmd.register_model_files()

            @functools.wraps(task)
            def with_full_argv(cfg: DictConfig) -> Any:
                # Lightning's DDP launcher re-runs sys.argv in child processes: give it the subcommand back.
                sys.argv = saved
                with users_setting():
                    if not is_multirun():
                        return task(cfg)
                    # In a sweep, DDP children must run this one job, and the next job needs a clean slate.
                    from modelforge.sweep.ddp import fresh_ddp_state, sweep_job_argv

                    sys.argv = sweep_job_argv(saved[: len(saved) - len(argv)])
                    with fresh_ddp_state():
                        return task(cfg)

            main = hydra.main(config_path=str(conf_dir()), config_name=config_name, version_base="1.3")
            main(report_errors(with_full_argv))()
        from modelforge.sweep.callback import exit_if_jobs_failed

        exit_if_jobs_failed()  # a sweep that went on past failed jobs (Optuna) still fails the command
        return 0
    except BaseException as exc:
        # Hydra stops a sweep at its first failed job without calling the callbacks'
        # on_multirun_end: print the summary table that the finished jobs left.
        from modelforge.sweep.callback import report_unfinished_sweeps

        report_unfinished_sweeps()
        if isinstance(exc, (SystemExit, KeyboardInterrupt, SweepJobError)) and not isinstance(exc, ConfigRefused):
            if isinstance(exc, SweepJobError):
                run_and_report(functools.partial(_reraise, exc))  # Hydra's one line, exit 1
            raise
        error = exc.error if isinstance(exc, ConfigRefused) else config_error(exc, cmd)
        if error is None:
            if user_full_error == "1":
                raise
            run_and_report(functools.partial(_reraise, exc))  # Hydra's own report, exit 1
            raise
        print(f"error: {error}", file=sys.stderr)
        return exc.code if isinstance(exc, ConfigRefused) else EXIT_CONFIG_ERROR
    finally:
        sys.argv = saved
        forget_validated()
