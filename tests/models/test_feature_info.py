"""feature_info as timm reports it, for every zoo model whatever its layout (issue 49): ``num_chs`` the channels of a
[C, H, W] map, of a channels-last [H, W, C] map (swin_t) and of a token sequence [L, D] (vit: D); ``reduction`` the
network's stride at that node, not a rounded size ratio."""

from __future__ import annotations

import pytest

from modelforge import ConfigError, create_model
from modelforge.config import conf_dir

# at each model's default size (1x28x28, MNIST): node -> (channels, stride), the strides counted from the layers
# (a 28x28 image's stride-16 map can be 1x1: 28 -> 14 -> 7 -> 3 -> 1 in convnext's 2x2 stride-2 downsamplings)
EXPECTED = {
    "convnext_tiny": {"stage1": (96, 2), "stage2": (192, 4), "stage3": (384, 8), "stage4": (768, 16)},
    "efficientnet_b0": {"stage1": (16, 2), "stage3": (40, 8), "stage5": (112, 16), "stage7": (320, 32)},
    "graph": {"stem": (32, 1), "down1": (64, 2), "skip2": (64, 2)},
    "graph_nn": {"stem": (16, 1), "body": (32, 4)},
    "lenet5": {"a1": (6, 1), "s2": (6, 2), "s4": (16, 4)},
    "lstm": {"lstm.0": (128, None)},
    "maxvit_t": {"stem": (64, 2), "stage1": (64, 4), "stage2": (128, 8), "stage3": (256, 16), "stage4": (512, 32)},  # 28 rows of 28 pixels read in order: steps, not a stride of the image
    "mobilenet_v3_small": {"stem": (16, 2), "b1": (16, 4), "b3": (24, 8), "b8": (48, 16), "b11": (96, 32)},
    "resnet18": {"layer1": (64, 1), "layer2": (128, 2), "layer3": (256, 4), "layer4": (512, 8)},
    "resnet34": {"layer1": (64, 1), "layer2": (128, 2), "layer3": (256, 4), "layer4": (512, 8)},
    "resnet50": {"layer1": (256, 4), "layer2": (512, 8), "layer3": (1024, 16), "layer4": (2048, 32)},
    "swin_t": {"stage1": (96, 4), "stage2": (192, 8), "stage3": (384, 16), "stage4": (768, 32)},  # channels-last
    "vit_b_16": {"encoder": (768, 4)},  # 49 tokens of 4x4 patches and the class token: D, and the patch size
    "vit_tiny": {"encoder": (64, 4)},
    "yolov8_cls": {"p1": (16, 2), "c2": (32, 4), "c3": (64, 8), "c4": (128, 16), "c5": (256, 32)},
    # image-to-image models (task=segment, reconstruct): their maps come back up to the input's size
    "unet": {"body": (8, 1)},  # the top level's decoder, at the input's size
    "autoencoder": {"enc1": (32, 2), "enc2": (64, 4), "up1": (32, 2)},
}
NOT_GRAPHS = {"cnn", "mlp", "seed_cnn"}  # builders without named nodes: features are refused


def test_every_zoo_model_is_covered() -> None:
    assert {p.stem for p in (conf_dir() / "model").glob("*.yaml")} == set(EXPECTED) | NOT_GRAPHS


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_feature_info_reports_channels_and_strides(name: str) -> None:
    nodes = EXPECTED[name]
    model = create_model(name, features=list(nodes))
    got = {info["module"]: (info["num_chs"], info["reduction"]) for info in model.feature_info}
    assert got == nodes
    for info in model.feature_info:  # the channels are a size of the map, whatever its layout
        assert info["num_chs"] in info["shape"]


@pytest.mark.parametrize("name", sorted(NOT_GRAPHS))
def test_a_model_without_named_nodes_refuses_features(name: str) -> None:
    with pytest.raises(ConfigError, match="has no named nodes to return"):
        create_model(name, features=["x"])


def test_swin_t_at_imagenets_shape_reports_96_and_768_channels() -> None:
    """The acceptance of issue 49, at 3x64x64 (the strides of 3x224x224, and the same channels, in less time)."""
    model = create_model("swin_t", ["in_channels=3", "input_size=[64,64]"], features=["stage1", "stage4"])
    assert [(i["num_chs"], i["reduction"], i["shape"]) for i in model.feature_info] == [
        (96, 4, [16, 16, 96]), (768, 32, [2, 2, 768])]
    assert not any(getattr(m, "sized", None) and m.sized.variants for m in model.modules())  # the probe's dropped


def test_vit_b_16_at_224_reports_the_width_and_the_patch_size() -> None:
    model = create_model("vit_b_16", ["in_channels=3", "input_size=[224,224]"], features=["encoder"])
    assert model.feature_info == [{"module": "encoder", "num_chs": 768, "reduction": 16, "shape": [197, 768]}]


def test_a_pooled_output_has_channels_and_no_stride() -> None:
    model = create_model("convnext_tiny", features=["stage4", "pool"])
    assert [(i["num_chs"], i["reduction"]) for i in model.feature_info] == [(768, 16), (768, None)]
