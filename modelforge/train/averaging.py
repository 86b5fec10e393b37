"""Weight averaging (Lightning's ``EMAWeightAveraging`` and ``StochasticWeightAveraging``): what a run says
of it, and the epoch that SWA adds.

SWA on a model with batch norm raises ``max_epochs`` by one while it fits: a last pass over the training data,
with no optimizer step, that recomputes the averaged weights' batch-norm statistics. The run's epochs (its
progress lines, its schedule's length, ``epochs`` in metrics.json) are the ones it trains, without that pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytorch_lightning as pl
from hydra.utils import get_class
from pytorch_lightning.callbacks import EMAWeightAveraging, StochasticWeightAveraging
from torch import nn

from modelforge.config import signature_defaults
from modelforge.registry import CALLBACKS


def _swa(trainer: pl.Trainer) -> StochasticWeightAveraging | None:
    return next((c for c in trainer.callbacks if isinstance(c, StochasticWeightAveraging)), None)


def _adds_pass(swa: StochasticWeightAveraging | None) -> bool:
    """Whether ``swa`` (its ``on_fit_start`` has run) adds the batch-norm pass to a run of known length."""
    return swa is not None and bool(swa._model_contains_batch_norm) and getattr(swa, "_max_epochs", -1) != -1


def training_epochs(trainer: pl.Trainer) -> int | None:
    """``trainer.max_epochs`` without the batch-norm pass SWA adds while it fits (None, -1: no limit)."""
    swa, limit = _swa(trainer), trainer.max_epochs
    if _adds_pass(swa) and limit == swa._max_epochs + 1:
        return swa._max_epochs
    return limit


def in_batch_norm_pass(trainer: pl.Trainer) -> bool:
    """Whether this epoch is SWA's batch-norm pass."""
    swa = _swa(trainer)
    return _adds_pass(swa) and trainer.current_epoch >= swa._max_epochs


def trained_epochs(trainer: pl.Trainer) -> int:
    """The epochs a finished fit trained (``trainer.current_epoch`` counts SWA's batch-norm pass too)."""
    swa = _swa(trainer)
    done = trainer.current_epoch
    return done - 1 if _adds_pass(swa) and done == swa._max_epochs + 1 else done


def _averaging_callbacks(callbacks_cfg: Mapping[str, Any] | None) -> Iterator[tuple[str, type, dict[str, Any]]]:
    """(name, class, options with the class's defaults) of each weight-averaging callback a run config chose."""
    for name, options in (callbacks_cfg or {}).items():
        options = dict(options or {})
        target = options.pop("_target_", None)
        cls = CALLBACKS.get(name) if target is None else get_class(target)  # checked before the run started
        if isinstance(cls, type) and issubclass(cls, (EMAWeightAveraging, StochasticWeightAveraging)):
            yield name, cls, {**signature_defaults(cls), **options}


def averaging_callbacks(callbacks_cfg: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(name, ``EMA`` or ``SWA``) of each weight-averaging callback a run config chose."""
    return [(name, "EMA" if issubclass(cls, EMAWeightAveraging) else "SWA")
            for name, cls, _ in _averaging_callbacks(callbacks_cfg)]


def describe_averaging(config: Mapping[str, Any], model: nn.Module) -> tuple[list[str], dict[str, Any]]:
    """The log lines and the metrics.json entry (``averaging``, by callback name) of the run's weight averaging."""
    lines, record = [], {}
    max_epochs = (config.get("trainer") or {}).get("max_epochs")
    for name, cls, options in _averaging_callbacks(config.get("callbacks")):
        if issubclass(cls, EMAWeightAveraging):
            decay = float(options["decay"])
            start = options.get("update_starting_at_step")
            start_epoch = options.get("update_starting_at_epoch")
            since = (f"from step {start}" if start is not None else
                     f"from epoch {start_epoch + 1}" if start_epoch is not None else "from the first step")
            lines.append(f"callbacks.{name}: the weights' exponential moving average (decay {decay:g}: about the last "
                         f"{round(1 / (1 - decay)):,} steps), {since}; validation, the test and the checkpoints "
                         "use it")
            record[name] = {"kind": "EMA", "decay": decay, "update_starting_at_step": start,
                            "update_starting_at_epoch": start_epoch}
        else:
            start = options["swa_epoch_start"]
            # Lightning's rule: a fraction of max_epochs, rounded down, or an epoch; counted from 1.
            first = max(int(max_epochs * start), 1) if isinstance(start, float) and isinstance(max_epochs, int) \
                else start
            lrs, epochs, how = options["swa_lrs"], options["annealing_epochs"], options["annealing_strategy"]
            sched = ((config.get("sched") or {}).get("_target_") or "none").rpartition(".")[2]
            norm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
            lines.append(f"callbacks.{name}: the weights averaged from epoch {first}"
                         + (f" of {max_epochs}" if isinstance(max_epochs, int) and max_epochs > 0 else "")
                         + f", the lr going to {lrs} (swa_lrs) over {epochs} epochs ({how}) in place of sched "
                         f"{sched}" + ("; then a pass over the training data, with no step, recomputes the "
                                       "batch-norm statistics of the average" if norm else ""))
            record[name] = {"kind": "SWA", "swa_epoch_start": first, "swa_lrs": lrs, "annealing_epochs": epochs,
                            "annealing_strategy": how, "batch_norm_pass": norm}
    return lines, ({"averaging": record} if record else {})
