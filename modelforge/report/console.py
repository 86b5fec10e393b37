"""What a run prints, by configuration: ``conf/hydra/job_logging/run.yaml`` sets the levels of
library loggers whose lines tell a user nothing, for every run (``eval``, runs from Python too);
``hydra.verbose=true`` brings everything back. Lightning-free: run.yaml names :data:`STDOUT`. The caller says
which DDP rank this process is (``modelforge.train.launch.global_rank``): only rank 0's INFO lines reach the console."""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

_WARNINGS = (  # (message, module) of warnings that no option prevents
    # Lightning 2.6 calls a pytree API that torch 2.13 deprecates.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"(pytorch_lightning|torch)\."),
    # A resumed run writes to a new run directory on purpose; ModelCheckpoint warns regardless.
    (r"The dirpath has changed from", r"pytorch_lightning\.callbacks\.model_checkpoint"),
    # trainer.accelerator=cpu on a GPU machine is a choice (eval tests on the device a run trained on);
    # the run's own "device:" line says where it runs.
    (r"GPU available but not used", r"pytorch_lightning\."),
    # callbacks=[swa] over a schedule stepped every batch (the default one-cycle): SWA replaces it, as the run's
    # own "callbacks.swa: ..." line says.
    (r"SWA is currently only supported every epoch", r"pytorch_lightning\.callbacks\.stochastic_weight_avg"),
)

# sys.stdout at each write (run.yaml's console stream): a Rich bar redirects it while drawing, to print lines above itself.
STDOUT = SimpleNamespace(write=lambda text: sys.stdout.write(text), flush=lambda: sys.stdout.flush())


def verbose() -> bool:
    """True when the user asked for detail (``hydra.verbose=true`` sets the root logger to DEBUG)."""
    return logging.getLogger().isEnabledFor(logging.DEBUG)


@functools.cache
def _job_logging() -> dict[str, Any]:
    from modelforge.config import conf_dir

    return yaml.safe_load((conf_dir() / "hydra" / "job_logging" / "run.yaml").read_text())


class _DropLines(logging.Filter):
    """Drops the records whose message contains ``text``: a line modelforge says in its own words."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


class _RankZeroInfo(logging.Filter):
    """Under DDP, every rank runs the whole command: on the console, INFO lines (the model, the device, ...) come
    from rank 0 only; the other ranks' warnings and errors still show, and their own log files keep everything."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO


# (logger, text) of library lines that repeat what modelforge says: EarlyStopping(verbose=True) logs why it stops,
# which the run's "early stopping: stopped after epoch N ..." line says too (its "improved" lines stay).
_REPEATED = (("pytorch_lightning.callbacks.early_stopping", "Signaling Trainer to stop"),)
# Lines kept from the console only: each DDP rank's "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" (the
# device line says x2); a rank's log file keeps it, where it tells the ranks' files apart.
_NOT_ON_CONSOLE = "Initializing distributed"


def quiet_library_notices() -> None:
    """Library loggers at run.yaml's levels from the start of a command, before Hydra applies run.yaml: in a check
    before the job, Lightning imports torchmetrics, which imports matplotlib, whose font manager announces building
    its cache (``generated new fontManager``, once per machine) while Hydra's own logging prints INFO lines."""
    for name, spec in _job_logging()["loggers"].items():
        logging.getLogger(name).setLevel(spec["level"])


def quiet_third_party(rank: int) -> None:
    """Library loggers at run.yaml's levels (at the root's when verbose: ``hydra.verbose=true`` lowers
    only the root's); Lightning's through the run's handlers; warnings no option prevents ignored, lines that repeat
    the run's own dropped; on a DDP rank other than 0, INFO lines held back."""
    for name, spec in _job_logging()["loggers"].items():
        logging.getLogger(name).setLevel(logging.NOTSET if verbose() else spec["level"])
    for name in ("lightning_fabric", "pytorch_lightning"):
        # Imported before logging was set up, they print through a handler of their own (and ours).
        if not (logger := logging.getLogger(name)).propagate:
            logger.handlers, logger.propagate = [], True
    for message, module in () if verbose() else _WARNINGS:
        warnings.filterwarnings("ignore", message=message, module=module)
    for name, text in _REPEATED:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, _DropLines)]:
            logger.removeFilter(old)
        if not verbose():
            logger.addFilter(_DropLines(text))
    _quiet_console(logging.getLogger().handlers, rank)


def _quiet_console(handlers: list[logging.Handler], rank: int) -> None:
    """On the console handlers (not the log files): rank 0's INFO lines only, and not the lines it need not show."""
    for handler in (h for h in handlers if not isinstance(h, logging.FileHandler)):
        for old in [f for f in handler.filters if isinstance(f, (_RankZeroInfo, _DropLines))]:
            handler.removeFilter(old)
        if rank != 0:
            handler.addFilter(_RankZeroInfo())
        if not verbose():
            handler.addFilter(_DropLines(_NOT_ON_CONSOLE))


@contextlib.contextmanager
def run_log(log_file: Path, rank: int) -> Iterator[None]:
    """For a run from Python, what Hydra does from run.yaml for the CLI: INFO and up to ``log_file``,
    and to stdout when nothing else prints, in run.yaml's format; undone afterwards."""
    root, saved_level = logging.getLogger(), logging.getLogger().level
    handlers = [logging.FileHandler(log_file), *([] if root.handlers else [logging.StreamHandler(STDOUT)])]
    for handler in handlers:
        handler.setFormatter(logging.Formatter(_job_logging()["formatters"]["simple"]["format"]))
        root.addHandler(handler)
    _quiet_console(handlers, rank)
    root.setLevel(min(saved_level, logging.INFO))
    try:
        yield
    finally:
        root.setLevel(saved_level)
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
