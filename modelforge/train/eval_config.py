"""What ``eval`` tests with: the data and trainer options (the run's, with this command's on top, or a data set
chosen on the command line), checked against the checkpoint's model before any test runs."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from torch import nn

from modelforge.errors import ConfigError
from modelforge.train.context import RunContext
from modelforge.train.trainer import available, resolved_device

log = logging.getLogger("modelforge.train.run")


def eval_data_config(given: Mapping[str, Any], stored: Mapping[str, Any],
                     context: RunContext = RunContext()) -> dict[str, Any]:
    """The training run's data settings (normalization, split, ...) with those this command set on top; a data set
    chosen on the command line that is not the run's (``data=idx``) with its own settings instead."""
    if context.chosen("data") and given.get("name") != stored.get("name"):
        return dict(given)
    return {**stored, **named_options(given, "data", context)}


def eval_trainer_options(given: Mapping[str, Any], stored: Mapping[str, Any],
                         context: RunContext = RunContext()) -> dict[str, Any]:
    """This command's trainer options, testing on the kind of device and in the precision the run trained with
    (a run records both: :func:`~modelforge.train.trainer.resolved_device`) unless it names its own."""
    named = named_options(given, "trainer", context)
    as_trained = {k: stored[k] for k in ("accelerator", "precision") if stored.get(k) is not None and k not in named}
    if "accelerator" in as_trained and not available(as_trained["accelerator"]):
        log.info("the checkpoint was trained on %s, which this machine lacks: testing on %s in %s, whose figures "
                 "may differ from the run's in the last digits", as_trained["accelerator"],
                 resolved_device({})["accelerator"], as_trained.get("precision", "its precision"))
        del as_trained["accelerator"]
    return {**given, **as_trained}


def named_options(given: Mapping[str, Any], group: str, context: RunContext = RunContext()) -> dict[str, Any]:
    """The keys of ``given`` (``group``'s config) that count: from the CLI, where ``given`` holds the group's defaults
    too, only those named on the command line, or a default would undo a setting the model was trained with."""
    named = context.named_keys(group)
    return dict(given) if named is None else {k: v for k, v in given.items() if k in named}


def check_data_fits(datamodule: Any, model: nn.Module, model_classes: int, used: Mapping[str, Any],
                    stored: Mapping[str, Any]) -> None:
    """Refuse data the checkpoint's model cannot be tested on, before any test runs: images of another shape, or
    labels past the classes it predicts (torch's ``IndexError: Target 7 is out of bounds`` after a while).
    ``used``/``stored``: the data config tested on and the run's. Data with fewer classes than the model predicts
    is tested; a line says what that means."""
    name = getattr(datamodule, "name", type(datamodule).__name__)
    trained_on = _data_label(stored)
    other = _data_label(used) != trained_on  # else the run's own data has changed: no hint repeats the command
    wanted, shape = getattr(model, "input_shape", None), getattr(datamodule, "input_shape", None)
    if wanted is not None and shape is not None and tuple(wanted) != tuple(shape):
        raise ConfigError("data", f"data {name!r} has images of shape {list(shape)}, but the checkpoint's model takes "
                                  f"{list(wanted)}",
                          hint=f"test it on images like those it was trained on: {trained_on}" if other else None)
    n_classes = getattr(datamodule, "n_classes", None)
    if n_classes is None or n_classes == model_classes:
        return
    if n_classes > model_classes:
        raise ConfigError("data", f"data {name!r} has {n_classes} classes (labels 0-{n_classes - 1}), but the "
                                  f"checkpoint's model predicts {model_classes}",
                          hint=f"test it on data with at most {model_classes} classes, e.g. the data it was trained "
                               f"on: {trained_on}" if other else None)
    extra = f"class {n_classes}" if model_classes - n_classes == 1 else f"classes {n_classes}-{model_classes - 1}"
    log.info("data %r has %d classes, the checkpoint's model predicts %d: a prediction of %s counts as wrong",
             name, n_classes, model_classes, extra)


def _data_label(data: Mapping[str, Any]) -> str:
    """``data=idx data.data_dir=/path`` or ``data=image_folder data.root=/path`` (what a user types to get the data a
    run stored)."""
    key = "root" if data.get("name") == "image_folder" else "data_dir"
    folder = f" data.{key}={data[key]}" if data.get(key) else ""
    return f"data={data.get('name', 'mnist')}{folder}"
