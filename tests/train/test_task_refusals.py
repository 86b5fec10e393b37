"""What a task beyond classification changes before any work: a zoo backbone gets its segmentation head, and a
surface that serves classifiers only (grad_cam, a captured step) is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelforge.errors import ConfigError
from modelforge.train.run_config import validate_run_config
from tests.train.conftest import compose_train

SMALL = ["data.n_train=80", "data.n_test=32", "data.val_size=16", "data.batch_size=16", "trainer.max_epochs=1"]


def test_a_zoo_backbone_segments_with_its_fpn_head(tiny_mnist: Path) -> None:
    run = validate_run_config(compose_train(tiny_mnist, "task=segment", "model=resnet18", *SMALL))
    assert run.config["model"]["head"] == "class_map"
    assert run.network.output_node == "class_map" and run.network.output_shape == (11, 56, 56)


def test_a_classifier_keeps_its_own_head(tiny_mnist: Path) -> None:
    run = validate_run_config(compose_train(tiny_mnist, "model=resnet18", "trainer.max_epochs=1"))
    assert run.config["model"]["head"] is None and run.network.output_shape == (10,)


@pytest.mark.parametrize("override, line", [
    ("hooks=[grad_cam]", r"^hooks.grad_cam: grad_cam explains the score of a predicted class, a classifier's; task "
                         r"'segment' gives \[n_classes, H, W\] class scores"),
    ("cuda_graph=true", r"^cuda_graph: a captured step trains a classifier only, not task 'segment'"),
])
def test_a_surface_of_classifiers_is_refused_for_segmentation(tiny_mnist: Path, override: str, line: str) -> None:
    with pytest.raises(ConfigError, match=line):
        validate_run_config(compose_train(tiny_mnist, "task=segment", "model=unet", override, *SMALL))
