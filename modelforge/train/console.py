"""What a run prints: modelforge's own lines, not third-party notices and deprecation noise.

Quiet by configuration, not by matching text. The job logging config
(``conf/hydra/job_logging/run.yaml``) sets the level of each library logger whose INFO
lines tell a user nothing; every run applies those levels, ``eval`` and runs from Python
too (:func:`quiet_third_party`). Lightning's and Optuna's options prevent the rest
(:mod:`modelforge.train.trainer`, :mod:`modelforge.sweep.optuna_logging`). Left here:
deprecation warnings that one library raises about another, which no option prevents.
Everything quieted comes back with ``hydra.verbose=true`` (root logger at DEBUG).

Lightning-free, so the logging config can name :data:`STDOUT` before Lightning is imported.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# (message regex, module regex) of warnings no option prevents, each with its reason.
_WARNINGS = (
    # Lightning 2.6 uses an API that torch 2.13 deprecates; nothing for a user to change.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"pytorch_lightning\.utilities\._pytree"),
    (r".*LeafSpec.* is deprecated", r"torch\.utils\._pytree"),
    # A resumed run writes to a run directory of its own, on purpose; ModelCheckpoint warns
    # whenever the directory differs from the checkpoint's, with no option to say it is meant.
    (r"The dirpath has changed from", r"pytorch_lightning\.callbacks\.model_checkpoint"),
)
# Lightning's packages give their loggers a handler of their own and stop propagation when they
# are imported before logging is set up (usually from Python): a record would print there and
# again through the run's handlers.
_OWN_HANDLERS = ("lightning_fabric", "pytorch_lightning")


class _Stdout:
    """``sys.stdout`` as it is at each write.

    A Rich progress bar in a terminal redirects ``sys.stdout`` while it draws, and prints what
    is written there above itself; a handler holding the original stream would write onto the
    bar's line instead.
    """

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()


STDOUT = _Stdout()  # the console handler's stream in conf/hydra/job_logging/run.yaml


def verbose() -> bool:
    """True when the user asked for detail (``hydra.verbose=true`` sets the root logger to DEBUG)."""
    return logging.getLogger().isEnabledFor(logging.DEBUG)


@functools.cache
def _job_logging() -> dict[str, Any]:
    """``conf/hydra/job_logging/run.yaml``: what a CLI run's logging is, for a run from Python too."""
    import yaml

    from modelforge.config import conf_dir

    return yaml.safe_load((conf_dir() / "hydra" / "job_logging" / "run.yaml").read_text())


def quiet_levels() -> dict[str, str]:
    """Each library logger that the job logging config quiets, and its level there."""
    loggers = _job_logging().get("loggers") or {}
    return {name: spec["level"] for name, spec in loggers.items() if "level" in (spec or {})}


def log_format() -> str:
    """The format of a run's log lines (console and ``train.log``)."""
    return _job_logging()["formatters"]["simple"]["format"]


def quiet_third_party() -> None:
    """Quiet a run (``train``, ``eval``, from the CLI or Python) as the job logging config says.

    The library loggers get the config's levels, and the warnings no option prevents are
    ignored; when verbose, the loggers follow the root logger instead (Hydra applies the
    config's levels, and ``hydra.verbose=true`` lowers only the root logger's).
    """
    for name, level in quiet_levels().items():
        logging.getLogger(name).setLevel(logging.NOTSET if verbose() else level)
    if not verbose():
        for message, module in _WARNINGS:
            warnings.filterwarnings("ignore", message=message, module=module)


@contextlib.contextmanager
def run_log(log_file: Path, enabled: bool = True) -> Iterator[None]:
    """Log INFO and up to ``log_file`` (and to stdout when nothing else prints) for one run.

    Hydra does this for CLI runs from ``conf/hydra/job_logging/run.yaml``; ``train(cfg)``
    called from Python uses this, with that file's format, so both print the same lines and
    leave the same ``train.log``. Everything is restored afterwards.
    """
    if not enabled:
        yield
        return
    root = logging.getLogger()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [logging.FileHandler(log_file)]
    if not root.handlers:
        handlers.append(logging.StreamHandler(STDOUT))
    for handler in handlers:
        handler.setFormatter(logging.Formatter(log_format()))
        root.addHandler(handler)
    saved_level = root.level
    if not root.isEnabledFor(logging.INFO):
        root.setLevel(logging.INFO)
    own = {name: logging.getLogger(name) for name in _OWN_HANDLERS if not logging.getLogger(name).propagate}
    saved_own = {name: list(logger.handlers) for name, logger in own.items()}
    for logger in own.values():  # through the run's handlers instead, once
        logger.handlers, logger.propagate = [], True
    try:
        yield
    finally:
        for name, logger in own.items():
            logger.handlers, logger.propagate = saved_own[name], False
        root.setLevel(saved_level)
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
