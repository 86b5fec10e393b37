"""How this process was started, which rank it is, and what rank 0 decides for every rank.

torchrun and SLURM's srun start one process per device, all at once, each running the whole command;
Lightning detects them (``TorchElasticEnvironment``, ``SLURMEnvironment``) and starts nothing itself.
Each rank would then pick its own run directory (the default holds the time and a random suffix): rank 0
decides such things and tells the others through a TCPStore, never through their clocks. Under torchrun
that is its agent's store, which the workers share (``TORCHELASTIC_USE_AGENT_STORE``); under srun, rank 0
hosts one where the process group will meet (``MASTER_ADDR:MASTER_PORT`` as ``SLURMEnvironment`` derives
them), and torch's own store for the group later shares its server (``multi_tenant``). Lightning-free
until a store is needed.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from modelforge.errors import ConfigError, ModelforgeError

TORCHRUN, SRUN = "torchrun", "srun"
# How long a rank waits for rank 0's word (rank 0 composes and checks the config first).
EXCHANGE_TIMEOUT_S = 300.0

_asked: Counter[str] = Counter()  # questions asked so far, by name: every rank asks them in the same order
_store: list[Any] = []  # this process's store (rank 0's server under srun), until the process group closes


class LaunchError(ModelforgeError):
    """The ranks of a launch could not agree: rank 0's own error (raised on every rank, so that all end
    as rank 0 does), no answer from rank 0, or no store to ask it through."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def external_launcher() -> str | None:
    """``"torchrun"`` or ``"srun"`` when one of them started this process, as Lightning detects them
    (torch elastic first; SLURM outside an interactive ``bash``/``interactive`` job); else None."""
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torch.distributed.is_torchelastic_launched(), without torch
        return TORCHRUN
    if "SLURM_NTASKS" in os.environ and os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        return SRUN
    return None


def world_size() -> int:
    """The processes torchrun or srun started for this run (1 otherwise)."""
    launcher = external_launcher()
    return int(os.environ.get("WORLD_SIZE" if launcher == TORCHRUN else "SLURM_NTASKS", "1")) if launcher else 1


def global_rank() -> int:
    """This process's rank: torchrun's ``RANK``, srun's ``SLURM_PROCID``, else ``LOCAL_RANK`` (a rank
    that Lightning's own launcher started, on this machine, from rank 0)."""
    launcher = external_launcher()
    name = "RANK" if launcher == TORCHRUN else "SLURM_PROCID" if launcher == SRUN else "LOCAL_RANK"
    return int(os.environ.get(name, "0") or 0)


def started_together() -> bool:
    """True when torchrun or srun started several ranks at once, each running the whole command."""
    return external_launcher() is not None and world_size() > 1


def rank_zero_decides(question: str, decide: Callable[[], str]) -> str:
    """``decide()`` on rank 0, and rank 0's answer on every other rank (or rank 0's error, raised there too).

    Without ranks started together, just ``decide()``. Every rank must ask the same questions in the same
    order: the n-th ``question`` of a rank is answered by rank 0's n-th.
    """
    if not started_together():
        return decide()
    _asked[question] += 1
    # A torchrun restart starts the workers again with the same agent store: the keys of each attempt differ.
    key = f"modelforge/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{question}/{_asked[question]}"
    store = _connect()
    if global_rank() == 0:
        try:
            answer = decide()
        except ModelforgeError as exc:
            store.set(key, "error:" + f"{getattr(exc, 'exit_code', 2)}:{exc}")
            raise
        store.set(key, "value:" + answer)
        return answer
    try:
        kind, _, answer = store.get(key).decode().partition(":")
    except Exception as exc:  # noqa: BLE001 - torch's store errors (a timeout, rank 0 gone) have no common type
        raise LaunchError(f"rank {global_rank()} got no answer from rank 0 on {question!r} within "
                          f"{EXCHANGE_TIMEOUT_S:.0f} s ({type(exc).__name__}: {exc}); see rank 0's output", 1) from None
    if kind == "error":
        code, _, message = answer.partition(":")
        raise LaunchError(message, int(code))
    return answer


def _connect() -> Any:
    if _store:
        return _store[0]
    from datetime import timedelta

    from torch.distributed import TCPStore

    timeout, (host, port), hosting = timedelta(seconds=EXCHANGE_TIMEOUT_S), _address(), global_rank() == 0
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # torchrun's agent hosts it: every rank is a client
        hosting = False
    try:
        # Rank 0 hosts the server under srun; torch's env:// rendezvous of the process group later finds it in
        # this process (both multi-tenant) instead of failing to bind the port a second time.
        store = TCPStore(host, port, is_master=hosting, wait_for_workers=False, multi_tenant=hosting, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - torch's store errors (port taken, host unknown) have no common type
        raise LaunchError(f"rank {global_rank()} cannot {'host' if hosting else 'reach'} the store of rank 0 at "
                          f"{host}:{port} ({type(exc).__name__}: {exc})", 1) from None
    _store.append(store)
    return store


def _address() -> tuple[str, int]:
    """Where the store is: torchrun's MASTER_ADDR/PORT, or where the process group will meet under srun
    (as SLURMEnvironment derives it: the first node of SLURM_NODELIST, 15000 + the job id's last 4 digits)."""
    if external_launcher() == SRUN:  # MASTER_ADDR and MASTER_PORT, where set, win there too
        from lightning_fabric.plugins.environments import SLURMEnvironment

        try:
            slurm = SLURMEnvironment()
        except RuntimeError as exc:  # e.g. --ntasks without --ntasks-per-node
            raise ConfigError("trainer", str(exc)) from None
        return slurm.main_address, slurm.main_port
    return os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))


def release_store() -> None:
    """Drop this process's store connection (and rank 0's server under srun) once the process group is closed."""
    _store.clear()


def check_layout(devices: int, num_nodes: int) -> None:
    """Under torchrun or srun, ``trainer.devices`` must be the processes per node and ``trainer.num_nodes``
    their nodes. Lightning checks this only for processes it starts itself (its launcher calls
    ``ClusterEnvironment.validate_settings``); started by others, a mismatch silently splits the data wrong."""
    launcher, world = external_launcher(), world_size()
    if launcher is None:
        return
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE" if launcher == TORCHRUN else "SLURM_NTASKS_PER_NODE", str(world)))
    nodes = max(world // max(per_node, 1), 1)
    if devices == per_node and devices * num_nodes == world:
        return
    raise ConfigError("trainer.devices" if devices != per_node else "trainer.num_nodes",
                      f"{launcher} started {world} process(es), {per_node} per node on {nodes} node(s), but the "
                      f"trainer asks for {devices} device(s) per node on {num_nodes} node(s)",
                      hint=f"trainer.devices={per_node} trainer.num_nodes={nodes}: one process per device; " + (
                          "trainer=ddp and ddp_cpu take both from torchrun by themselves" if launcher == TORCHRUN else
                          "srun --ntasks-per-node=<devices> --nodes=<num_nodes>, each task seeing all the node's GPUs"))
