"""What a run prints: modelforge's own lines, not third-party adverts and deprecation noise.

Lightning-free, so the logging config (``conf/hydra/job_logging/run.yaml``) can name
:class:`QuietFilter` before Lightning is imported. Everything dropped here comes back
with ``hydra.verbose=true`` (root logger at DEBUG).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

# Lightning's INFO lines that tell a CPU user nothing, and its adverts. Matched at the start
# of the message, on Lightning's own logger only.
_LIGHTNING_LOGGER = "pytorch_lightning.utilities.rank_zero"
_LIGHTNING_NOISE = (
    "💡 Tip:",
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "Loading `train_dataloader` to estimate number of stepping batches",
)
# (message regex, module regex) of third-party warnings that a user cannot act on.
_WARNINGS = (
    # Lightning 2.6 uses an API that torch 2.13 deprecates; nothing for a user to change.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"pytorch_lightning\.utilities\._pytree"),
    (r".*LeafSpec.* is deprecated", r"torch\.utils\._pytree"),
    # A resumed run writes to a run directory of its own, on purpose.
    (r"The dirpath has changed from", r"pytorch_lightning\.callbacks\.model_checkpoint"),
)
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def verbose() -> bool:
    """True when the user asked for detail (``hydra.verbose=true`` sets the root logger to DEBUG)."""
    return logging.getLogger().isEnabledFor(logging.DEBUG)


class QuietFilter(logging.Filter):
    """Drops Lightning's adverts and hardware banner, unless the run is verbose."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != _LIGHTNING_LOGGER or verbose():
            return True
        return not str(record.msg).startswith(_LIGHTNING_NOISE)


def quiet_third_party() -> None:
    """Silence the known third-party warnings (by message and module); a no-op when verbose."""
    if verbose():
        return
    lightning = logging.getLogger(_LIGHTNING_LOGGER)
    if not any(isinstance(f, QuietFilter) for f in lightning.filters):
        # On the logger itself: Lightning may log through a handler of its own (from Python).
        lightning.addFilter(QuietFilter())
    for message, module in _WARNINGS:
        warnings.filterwarnings("ignore", message=message, module=module)
    # matplotlib announces building its font cache, once per machine, on import.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.WARNING)


@contextlib.contextmanager
def run_log(log_file: Path, enabled: bool = True) -> Iterator[None]:
    """Log INFO and up to ``log_file`` (and to stdout when nothing else prints) for one run.

    Hydra does this for CLI runs; ``train(cfg)`` called from Python uses this, so both
    leave the same ``train.log``. The handlers and the root level are restored afterwards.
    """
    if not enabled:
        yield
        return
    root = logging.getLogger()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [logging.FileHandler(log_file)]
    if not root.handlers:
        handlers.append(logging.StreamHandler(sys.stdout))
    # Lightning stops propagation when imported before logging is set up: attach there too.
    targets = [root, *(lg for lg in (logging.getLogger("pytorch_lightning"),) if not lg.propagate)]
    for handler in handlers:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler.addFilter(QuietFilter())
        for target in targets:
            target.addHandler(handler)
    saved_level = root.level
    if not root.isEnabledFor(logging.INFO):
        root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.setLevel(saved_level)
        for handler in handlers:
            for target in targets:
                target.removeHandler(handler)
            handler.close()
