"""``features`` names each kept node once: a node named twice, or one the model leaves out (the head of a model
built with ``n_classes=null``), is refused where it gave one map for two names or another node's map."""

from __future__ import annotations

import pytest

from modelforge import ConfigError, create_model


def test_a_node_named_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^model.features: names 'layer3' more than once: the model returns one "
                       "map per node"):
        create_model("resnet18", features=["layer2", "layer3", "layer3"])


def test_a_node_of_the_left_out_head_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^model.features: names 'fc', which this model leaves out \(n_classes "
                       r"null leaves out the head"):
        create_model("resnet18", ["n_classes=null"], features=["fc"])
    kept = create_model("resnet18", ["n_classes=null"], features=["layer4"])
    assert [info["module"] for info in kept.feature_info] == ["layer4"]
