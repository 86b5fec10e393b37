"""A task's loss is any ``torch.nn`` loss by name with its arguments, and its metrics are torchmetrics' by name: both
checked when the task is built, before any work, with the key, what is allowed and the closest name."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from modelforge.errors import ConfigError
from modelforge.tasks import build_task

REGRESS = {"name": "regress", "output": "numbers", "metrics": {"mae": {"name": "MeanAbsoluteError"}}, "main": "mae"}


def test_any_torch_loss_by_name_takes_its_arguments() -> None:
    loss = build_task({**REGRESS, "loss": {"name": "SmoothL1Loss", "beta": 0.5}}).build_loss()
    assert isinstance(loss, nn.SmoothL1Loss) and loss.beta == 0.5
    assert float(loss(torch.tensor([0.0]), torch.tensor([0.25]))) == pytest.approx(0.0625)  # 0.5 * 0.25**2 / 0.5


def test_a_misspelt_loss_is_refused_with_the_closest_name() -> None:
    with pytest.raises(ConfigError) as refused:
        build_task({**REGRESS, "loss": {"name": "MSELos"}})
    assert refused.value.path == "task.loss.name" and "MSELoss" in refused.value.suggestions


def test_a_loss_argument_of_the_wrong_type_names_its_key() -> None:
    with pytest.raises(ConfigError) as refused:
        build_task({**REGRESS, "loss": {"name": "SmoothL1Loss", "beta": "wide"}})
    assert refused.value.path == "task.loss.beta"


def test_a_metric_by_name_is_built_with_its_arguments_and_the_datas_count() -> None:
    task = build_task({"name": "segment", "output": "class_map", "loss": {"name": "CrossEntropyLoss", "ignore_index": 255},
                       "metrics": {"iou": {"name": "MulticlassJaccardIndex", "average": "micro"}}, "main": "iou"})
    iou = task.build_metrics(3)["iou"]
    assert type(iou).__name__ == "MulticlassJaccardIndex" and iou.num_classes == 3 and iou.ignore_index == 255
    assert iou.average == "micro"


def test_a_misspelt_metric_and_a_main_that_is_no_metric_are_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        build_task({**REGRESS, "metrics": {"mae": {"name": "MeanAbsolutError"}}})
    assert refused.value.path == "task.metrics.mae.name" and "MeanAbsoluteError" in refused.value.suggestions
    with pytest.raises(ConfigError) as refused:
        build_task({**REGRESS, "main": "r2"})
    assert refused.value.path == "task.main"
