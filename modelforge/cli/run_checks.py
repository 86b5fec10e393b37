"""The CLI's side of a run: what it reads from Hydra and hands the library as plain arguments, and the Hydra callbacks
that check a run before Hydra writes anything.

CheckBeforeRun (``train``) and CheckEvalBeforeRun (``eval``) check a run's config and directory after Hydra composes,
before it writes there: a refusal leaves nothing behind; a config that passes claims the directory and reaches the
task validated (handed over through Hydra's ``on_job_start``). ShareRunDir gives every rank of a torchrun or srun launch rank 0's run directory."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write

from modelforge.errors import ConfigError, ModelforgeError
from modelforge.models.definitions import ModelFiles
from modelforge.train import launch
from modelforge.train.context import RunContext
from modelforge.train.records import claim_run_dir, refuse

def run_context(hydra_cfg: DictConfig) -> RunContext:
    """What the library needs to know of a Hydra job (``hydra_cfg``: the config's ``hydra`` node): its overrides,
    that errors name ``hydra.run.dir``, the model file and config folders (an error's file:line), and that Hydra's job
    logging writes train.log."""
    runtime = hydra_cfg.runtime
    model = runtime.choices.get("model")
    folders = tuple(Path(s.path) for s in runtime.config_sources if s.schema == "file")
    return RunContext(launched_from="cli", overrides=tuple(str(o) for o in hydra_cfg.overrides.task),
                      dir_key="hydra.run.dir", model_files=ModelFiles(str(model), folders) if model else None,
                      writes_log=False)


def job_context(claimed: bool = False) -> tuple[Path, RunContext]:
    """The run directory and context of the Hydra job in progress (a task's, or a sweep job's); ``claimed``: a
    callback claimed the directory for it."""
    hydra_cfg = HydraConfig.get()
    return Path(hydra_cfg.runtime.output_dir), dataclasses.replace(run_context(hydra_cfg), claimed=claimed)


def _task_config(config: DictConfig) -> DictConfig:
    return OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])


class Task:
    """A command's task as Hydra runs it, with the run a callback checked for it. Hydra hands the task function to
    its callbacks' ``on_job_start`` (its public API): there the callback that checked the run gives it over."""

    def __init__(self, run: Callable[[DictConfig, Any], Any]) -> None:
        self.run, self.checked = run, None

    def __call__(self, cfg: DictConfig) -> Any:
        checked, self.checked = self.checked, None
        return self.run(cfg, checked)


class _CheckFirst(Callback):
    """Checks a run in ``on_run_start``, before Hydra makes the run directory, and hands what it checked (and
    claimed) to the task in ``on_job_start``. A sweep's jobs get nothing: ``train`` checks and claims each."""

    def __init__(self) -> None:
        self.checked: Any = None

    def on_job_start(self, config: DictConfig, *, task_function: Any, **kwargs: Any) -> None:
        if isinstance(task_function, Task) and self.checked is not None:
            task_function.checked, self.checked = self.checked, None


class CheckBeforeRun(_CheckFirst):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from modelforge.train.run_config import validate_run_config  # loads Lightning

        HydraConfig.instance().set_config(config)  # as run_job does first: ${hydra:...} resolves
        context = run_context(config.hydra)
        try:
            run_config = validate_run_config(_task_config(config), context)
            claim_run_dir(Path(str(OmegaConf.select(config, "hydra.run.dir"))), dir_key=context.dir_key)
        except ModelforgeError as exc:
            refuse(exc)
        self.checked = run_config


class CheckEvalBeforeRun(_CheckFirst):
    """``eval``'s: the checkpoint read and its model rebuilt, the data found and checked against it, before Hydra
    makes the run directory; a refusal leaves nothing behind. A config that passes claims the directory."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from modelforge.train.run import check_eval  # loads Lightning

        HydraConfig.instance().set_config(config)  # as run_job does first: errors name hydra.run.dir
        try:
            share_run_dir(config)
            context = run_context(config.hydra)
            plan = check_eval(_task_config(config), context)
            claim_run_dir(Path(str(config.hydra.run.dir)), str(config.hydra.job.name), dir_key=context.dir_key)
        except ModelforgeError as exc:
            refuse(exc)
        self.checked = plan


def share_run_dir(config: DictConfig) -> None:
    """Of ranks that torchrun or srun started together, every one takes rank 0's ``hydra.run.dir``.

    Each rank composed its own, and the default holds its clock's time and a random suffix. Ranks
    other than 0 write no ``.hydra/`` there and log to ``<job>_ddp_process_<rank>.log``, as the ranks
    that Lightning's own launcher starts do.
    """
    if not launch.started_together():
        return
    HydraConfig.instance().set_config(config)  # as run_job does first: ${hydra:...} resolves
    run_dir = launch.rank_zero_decides("run_dir", lambda: os.path.abspath(str(OmegaConf.select(config, "hydra.run.dir"))))
    if (rank := launch.global_rank()) > 0:
        with read_write(config.hydra):
            config.hydra.run.dir = run_dir
            config.hydra.output_subdir = None
            config.hydra.job.name = f"{config.hydra.job.name}_ddp_process_{rank}"


class ShareRunDir(Callback):
    """One run directory for all ranks of a torchrun or srun launch (before any rank checks or claims it);
    a sweep (``-m``) started that way is refused: every rank would run all of it."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            share_run_dir(config)
        except ModelforgeError as exc:
            refuse(exc)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if launch.started_together():
            refuse(ConfigError("-m", f"a sweep started by {launch.external_launcher()} would run whole in each of "
                                     f"its {launch.world_size()} processes",
                               hint="start a sweep once: `python -m modelforge train -m trainer=ddp ...` starts each "
                                    "job's ranks itself; hydra/launcher=slurm runs each job as srun tasks"))
