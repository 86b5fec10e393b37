"""DDP inside a sweep: each job starts, and ends, its own group of processes.

Lightning's DDP launcher re-runs ``sys.argv`` per extra device: in a ``-m`` sweep, the whole sweep (every
job, Optuna trials of their own); :func:`sweep_job_argv` gives them the one job. It also leaves ``LOCAL_RANK``
& co. set, so the next job would wait for peers that have exited: :func:`fresh_ddp_state` restores them.
Upstream: facebookresearch/hydra#2070, Lightning-AI/pytorch-lightning#11300. (Each run reaps its
own ranks: :mod:`modelforge.train.ddp_teardown`.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from omegaconf import DictConfig, read_write

# What lightning_fabric's _SubprocessScriptLauncher writes into os.environ.
DDP_ENV_VARS = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "OMP_NUM_THREADS")


def sweep_job_argv(command: Sequence[str], hydra_cfg: DictConfig) -> list[str]:
    """``command`` (e.g. ``[.../__main__.py, "train"]``) plus this job's overrides (``hydra_cfg``: the job's Hydra
    config, which the CLI reads), for the DDP children.

    Lightning adds ``hydra.run.dir=<hydra.run.dir>`` for them: pointed at this job's directory,
    all ranks share one run directory.
    """
    with read_write(hydra_cfg.run):
        hydra_cfg.run.dir = hydra_cfg.runtime.output_dir
    return [*command, *hydra_cfg.overrides.task]


@contextmanager
def fresh_ddp_state() -> Iterator[None]:
    """Restore the DDP environment variables and torch's thread count (divided among ranks) after a job."""
    saved_env, threads = {key: os.environ.get(key) for key in DDP_ENV_VARS}, torch.get_num_threads()
    try:
        yield
    finally:
        for key in DDP_ENV_VARS:
            os.environ.pop(key, None)
        os.environ.update({key: value for key, value in saved_env.items() if value is not None})
        torch.set_num_threads(threads)
