"""SIGTERM and SIGUSR1 stop a run at the end of the current batch, keeping a resumable checkpoint.

Lightning already does the hard part for SIGTERM: while ``fit``/``test`` run, its signal
connector sets ``trainer.received_sigterm`` and the loops raise ``SIGTERMException`` at the
end of the batch, after which the callbacks' ``on_exception`` save ``interrupted.ckpt``.
Lightning then lets that exception end the process with status 0, as if it had finished;
:func:`stop_signals` records which signal came so that ``train()`` reports it (status
``terminated``, exit ``128 + signal``). SIGUSR1, which clusters send ahead of a kill, is
turned into a SIGTERM to this process so it takes the same path (not under SLURM, where
Lightning's auto-requeue owns SIGUSR1). Outside Lightning's loops
(building the model, loading data) the handler raises :class:`Terminated` at once.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from modelforge.stops import Terminated

@dataclass
class ReceivedSignal:
    """The first stop signal this run got (None: none)."""

    signum: int | None = None


@contextmanager
def stop_signals() -> Iterator[ReceivedSignal]:
    """Handle SIGTERM/SIGUSR1 for the duration of a run; yields what was received."""
    received = ReceivedSignal()
    if threading.current_thread() is not threading.main_thread():
        yield received  # only the main thread may set handlers (e.g. a run inside a joblib thread)
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if received.signum is None:
            received.signum = signum
        # While Lightning's loops run, its own handler (installed over this one, and calling
        # it) makes the loop stop at the end of the batch; outside them, stop here.
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            raise Terminated(received.signum)

    def on_sigusr1(signum: int, frame: FrameType | None) -> None:
        if received.signum is None:
            received.signum = signum
        signal.raise_signal(signal.SIGTERM)

    handlers = {signal.SIGTERM: on_sigterm}
    if "SLURM_JOB_ID" not in os.environ:
        handlers[signal.SIGUSR1] = on_sigusr1
    saved = {s: signal.getsignal(s) for s in handlers}
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    try:
        yield received
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
