"""What a run prints, by configuration: ``conf/hydra/job_logging/run.yaml`` sets the levels of
library loggers whose lines tell a user nothing, for every run (``eval``, runs from Python too);
``hydra.verbose=true`` brings everything back. Lightning-free: run.yaml names :data:`STDOUT`."""

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


def quiet_third_party() -> None:
    """Library loggers at run.yaml's levels (at the root's when verbose: ``hydra.verbose=true`` lowers
    only the root's); Lightning's through the run's handlers; warnings no option prevents ignored."""
    for name, spec in _job_logging()["loggers"].items():
        logging.getLogger(name).setLevel(logging.NOTSET if verbose() else spec["level"])
    for name in ("lightning_fabric", "pytorch_lightning"):
        # Imported before logging was set up, they print through a handler of their own (and ours).
        if not (logger := logging.getLogger(name)).propagate:
            logger.handlers, logger.propagate = [], True
    for message, module in () if verbose() else _WARNINGS:
        warnings.filterwarnings("ignore", message=message, module=module)


@contextlib.contextmanager
def run_log(log_file: Path) -> Iterator[None]:
    """For a run from Python, what Hydra does from run.yaml for the CLI: INFO and up to ``log_file``,
    and to stdout when nothing else prints, in run.yaml's format; undone afterwards."""
    root, saved_level = logging.getLogger(), logging.getLogger().level
    handlers = [logging.FileHandler(log_file), *([] if root.handlers else [logging.StreamHandler(STDOUT)])]
    for handler in handlers:
        handler.setFormatter(logging.Formatter(_job_logging()["formatters"]["simple"]["format"]))
        root.addHandler(handler)
    root.setLevel(min(saved_level, logging.INFO))
    try:
        yield
    finally:
        root.setLevel(saved_level)
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
