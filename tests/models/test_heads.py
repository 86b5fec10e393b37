"""A graph model's ``heads``: other heads it can carry, by the output they give, one built in place of its own with
``head`` (``task=segment`` chooses ``class_map``). The zoo's backbones carry ``fpn_head`` (conf/blocks/fpn.yaml) on
their four stages, which reads each stage's size from ``input_shapes``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from modelforge import ConfigError, build_model, create_model

WITH_FPN = ["resnet18", "resnet34", "resnet50", "convnext_tiny", "mobilenet_v3_small", "efficientnet_b0"]


@pytest.mark.parametrize("name", WITH_FPN)
@pytest.mark.parametrize(("size", "channels"), [([56, 56], 1), ([36, 52], 3)])
def test_a_zoo_backbone_with_its_fpn_head_gives_classes_per_pixel(name: str, size: list[int], channels: int) -> None:
    model = create_model(name, ["head=class_map", "n_classes=4", f"input_size=[{size[0]},{size[1]}]",
                                f"in_channels={channels}"])
    assert model(torch.zeros(1, channels, *size)).shape == (1, 4, *size)
    assert model.output_node == "class_map"
    assert not any(n.startswith(("nodes.fc", "nodes.pool")) for n, _ in model.named_modules())  # classifier left out


def test_the_backbone_keeps_the_classifiers_weights_for_one_seed() -> None:
    """The head is added after the trunk: the trunk's weights are those of the classifier's, as a head-less one."""
    classifier = create_model("resnet18", ["n_classes=4"], seed=0).state_dict()
    segmenter = create_model("resnet18", ["n_classes=4", "head=class_map"], seed=0).state_dict()
    trunk = [k for k in segmenter if k.startswith("nodes.layer")]
    assert trunk and all(torch.equal(classifier[k], segmenter[k]) for k in trunk)


def graph(**extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8],
            "nodes": {"a": {"block": "conv", "args": {"out_channels": 4}},
                      "b": {"block": "conv", "args": {"out_channels": 4, "stride": 2}},
                      "pool": {"block": "global_avg_pool"}, "fc": {"block": "nn.Linear", "args": {"out_features": 3}}},
            **extra}


def test_an_unknown_head_is_refused_with_the_heads_there_are() -> None:
    with pytest.raises(ConfigError, match=r"^model.head: the model has no head 'class_mapp'\n  did you mean 'class_map'"):
        build_model(graph(heads={"class_map": {"block": "conv", "args": {"out_channels": 3}}}, head="class_mapp"))
    with pytest.raises(ConfigError, match=r"model.head: the model has no head 'class_map'\n  allowed: none: this "
                                          r"model's file has no `heads`"):
        build_model(graph(head="class_map"))


def test_a_head_named_as_a_node_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^model.heads.fc: 'fc' names a node of the model already"):
        build_model(graph(heads={"fc": {"block": "conv", "args": {"out_channels": 3}}}, head="fc"))


def test_a_composite_reads_the_shape_of_each_of_its_inputs() -> None:
    """input_shapes: the size of the second input, to bring the first to it (a stride-2 step that floors)."""
    blocks = {"up_to": {"params": {}, "nodes": {"up": {"block": "nn.Upsample", "inputs": ["input.0"], "args": {
        "size": ["input_shapes[1][1]", "input_shapes[1][2]"]}}, "sum": {"block": "add", "inputs": ["up", "input.1"]}}}}
    model = build_model(graph(blocks=blocks, input_size=[9, 9],
                              heads={"map": {"block": "up_to", "inputs": ["b", "a"]}}, head="map"))
    assert model.output_shape == (4, 9, 9)
    assert model(torch.zeros(2, 1, 13, 11)).shape == (2, 4, 13, 11)  # rebuilt at another size, as input_shape
