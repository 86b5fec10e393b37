"""The run's model section: its model config, checked once, where validate_run_config makes the plan."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any

from modelforge.build import model_config_from_run, naming_definitions, validate_model_config
from modelforge.data.shapes import fill_model_shapes
from modelforge.models.definitions import ModelFiles


@dataclass
class ModelPlan:
    """A run config's ``model`` (with the top-level shortcuts, ``enc_sizes=...``, merged in), checked when made: the
    data's input shape and class count filled in where the config leaves them to the data (set on purpose, in
    ``explicit`` or unlike the default, they must agree), then validated against the model's schema or signature and
    its init rules (errors inside a composite name the line of ``files`` that defines it).

    ``config``: the plain model config (what config.yaml stores under ``model``); ``checked``: what
    :func:`~modelforge.build.build_checked_model` builds."""

    run: InitVar[Mapping[str, Any]]
    datamodule: InitVar[Any]
    explicit: InitVar[Collection[str]] = ()
    task: InitVar[Any] = None  # a Task: its output picks the head a model file offers for it (task=segment)
    files: ModelFiles | None = None
    config: dict[str, Any] = field(init=False)
    checked: Any = field(init=False)

    def __post_init__(self, run: Mapping[str, Any], datamodule: Any, explicit: Collection[str], task: Any) -> None:
        model = model_config_from_run(run)
        self.config = fill_model_shapes(task.choose_head(model) if task is not None else model, datamodule, explicit)
        with naming_definitions(self.files):
            self.checked = validate_model_config(self.config)
