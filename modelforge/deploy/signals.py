"""SIGTERM and Ctrl-C during ``export``: one message saying what they interrupted, and training's exit codes
(143, 130). Without a handler, SIGTERM ends the process where it stands, and a file being written leaves its
temp file behind; here it becomes an exception, and the write under way removes its temp file as the
exception passes through it (:mod:`modelforge.files.atomic`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from modelforge.errors import Interrupted, Terminated
from modelforge.files.atomic import stop as stop_now_or_after_commit


class Doing:
    """What the command is doing now (``while writing FILE ...``): the end of a stop's message."""

    def __init__(self, what: str) -> None:
        self.what = what


class _Signalled(SystemExit):
    """Raised by the SIGTERM handler: a SystemExit, so that no ``except Exception`` on the way (a loader's, an
    exporter's) mistakes it for their own failure, and the process still exits 128 + signal if nothing turns
    it into :class:`Terminated`."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


@contextmanager
def stopped_by_signals(doing: str) -> Iterator[Doing]:
    """SIGTERM raises inside the block (in the main thread; elsewhere only Python may set handlers); it and
    Ctrl-C leave it as :class:`Terminated` / :class:`Interrupted` ending with what ``Doing.what`` says then.

    A signal that comes while a file is renamed into place waits until the writer has noted it in ``Doing.what``
    (:func:`modelforge.files.atomic.committing`): the message says whether the file was written.
    """
    now = Doing(doing)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_now_or_after_commit(KeyboardInterrupt() if signum == signal.SIGINT else _Signalled(signum))

    main = threading.current_thread() is threading.main_thread()
    saved = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        yield now
    except BaseException as exc:
        stopped_by = stop_behind(exc)
        if isinstance(stopped_by, _Signalled):
            raise Terminated(stopped_by.signum, now.what) from None
        if isinstance(stopped_by, KeyboardInterrupt):
            raise Interrupted(now.what) from None
        raise
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def stop_behind(exc: BaseException) -> BaseException | None:
    """The SIGTERM or Ctrl-C among ``exc`` and the exceptions it was raised while handling: an exporter wraps
    what stopped it in an error of its own (torch.onnx's TorchExportError), which must not read as its failure."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, (_Signalled, KeyboardInterrupt)):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None
