"""DDP inside a sweep: each job starts, and ends, its own group of processes.

Lightning's DDP launcher re-runs ``sys.argv`` once per extra device. In a ``-m``
sweep that command line is the whole sweep, so each child would run every job (and
draw Optuna trials of its own); :func:`sweep_job_argv` gives the children the one
job instead. The launcher also leaves ``LOCAL_RANK`` & co. in the environment, so
the next job of the sweep would take the processes as already launched and wait
for peers that have exited; :func:`fresh_ddp_state` puts them back after each job.
(Each run closes its own process group and reaps its ranks:
:mod:`modelforge.train.ddp_teardown`.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

# What lightning_fabric's _SubprocessScriptLauncher writes into os.environ.
DDP_ENV_VARS = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "OMP_NUM_THREADS")


def sweep_job_argv(command: Sequence[str]) -> list[str]:
    """``command`` (e.g. ``[.../__main__.py, "train"]``) plus this sweep job's overrides.

    Lightning adds ``hydra.run.dir=<hydra.run.dir>`` for the children: that key is
    pointed at this job's directory, so all ranks share one run directory.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import read_write

    hydra_cfg = HydraConfig.get()
    with read_write(hydra_cfg.run):
        hydra_cfg.run.dir = hydra_cfg.runtime.output_dir
    return [*command, *hydra_cfg.overrides.task]


@contextmanager
def fresh_ddp_state() -> Iterator[None]:
    """Restore the DDP environment variables and torch's thread count after a job."""
    import torch

    saved_env = {key: os.environ.get(key) for key in DDP_ENV_VARS}
    threads = torch.get_num_threads()  # the launcher divides the CPU threads among processes
    try:
        yield
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        torch.set_num_threads(threads)
