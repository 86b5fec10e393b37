"""Backbones and feature maps for other projects (issue 39.2): a headless resnet18 is torchvision's resnet18 without
its ``fc``, resnet50's layer2..layer4 maps are torchvision's, nodes no map needs are not built, and a backbone trains
inside a user's own ``nn.Module`` with a plain torch loop (the README's example)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from modelforge import ConfigError, build_model, create_model
from tests.helpers.parity import copy_torchvision_weights, randomize, torchvision_models

tv_models = torchvision_models()


def test_headless_resnet18_equals_torchvision_resnet18_without_fc() -> None:
    """The zoo's resnet18 is torchvision's with the small-image stem (a 3x3 conv, no max-pool), as commonly
    adapted for 28x28 or 32x32 images: torchvision's model, so adapted, is the reference."""
    reference = tv_models.resnet18(weights=None)
    reference.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    reference.maxpool, reference.fc = nn.Identity(), nn.Identity()
    ours, x = create_model("resnet18", ["n_classes=null"]), torch.randn(2, 1, 28, 28)
    randomize(reference, x)
    copy_torchvision_weights(reference, ours, x)
    reference.eval(), ours.eval()
    with torch.no_grad():
        expected, got = reference(x), ours(x)
    assert got.shape == expected.shape == (2, 512)
    assert (got - expected).abs().max().item() == 0.0


def _resnet50_maps(side: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Ours (built for 3x224x224, run at side x side) and torchvision's layer2..layer4 maps, weights copied."""
    reference = tv_models.resnet50(weights=None)
    ours = create_model("resnet50", ["in_channels=3", "input_size=[224,224]"], features=["layer2", "layer3", "layer4"])
    assert list(ours.nodes) == ["stem", "maxpool", "layer1", "layer2", "layer3", "layer4"]  # no pool, flat, fc built
    assert ours.feature_info == [
        {"module": "layer2", "num_chs": 512, "reduction": 8, "shape": [512, 28, 28]},
        {"module": "layer3", "num_chs": 1024, "reduction": 16, "shape": [1024, 14, 14]},
        {"module": "layer4", "num_chs": 2048, "reduction": 32, "shape": [2048, 7, 7]}]
    x = torch.randn(2, 3, side, side)
    reference.fc = nn.Identity()
    randomize(reference, x)
    copy_torchvision_weights(nn.Sequential(*list(reference.children())[:-2]), ours, x)  # ours has no pool, no fc
    reference.eval(), ours.eval()
    with torch.no_grad():
        y = reference.maxpool(reference.relu(reference.bn1(reference.conv1(x))))
        expected = {}
        for name in ("layer1", "layer2", "layer3", "layer4"):
            y = expected[name] = getattr(reference, name)(y)
        return ours(x), {k: expected[k] for k in ("layer2", "layer3", "layer4")}


def test_resnet50_feature_maps_are_torchvision_layer2_to_layer4() -> None:
    """Built for 3x224x224 (the shapes above, from the build's dry run) and compared at 64x64: a conv net's
    weights are the same at any size, and 64x64 runs in a tenth of the time."""
    maps, expected = _resnet50_maps(64)
    assert [list(m.shape) for m in maps.values()] == [[2, 512, 8, 8], [2, 1024, 4, 4], [2, 2048, 2, 2]]
    assert all((maps[k] - expected[k]).abs().max().item() == 0.0 for k in expected)


@pytest.mark.slow
def test_resnet50_feature_maps_at_224() -> None:
    maps, expected = _resnet50_maps(224)
    assert [list(m.shape) for m in maps.values()] == [[2, 512, 28, 28], [2, 1024, 14, 14], [2, 2048, 7, 7]]
    assert all((maps[k] - expected[k]).abs().max().item() == 0.0 for k in expected)


def test_feature_maps_hold_the_whole_model_weights_for_one_seed() -> None:
    whole = create_model("resnet18", seed=3).state_dict()
    maps = create_model("resnet18", seed=3, features=["layer1", "layer3"]).state_dict()
    assert maps.keys() <= whole.keys() and not any(k.startswith("nodes.layer4") for k in maps)
    assert all(torch.equal(v, whole[k]) for k, v in maps.items())


def test_features_of_copies_and_parts_and_their_errors() -> None:
    model = create_model("resnet18", features=["layer2.0", "layer2"])  # copy 0 of layer2, and its last
    assert [f["shape"] for f in model.feature_info] == [[128, 14, 14], [128, 14, 14]]
    with pytest.raises(ConfigError, match=r"(?s)model.features\[0\]: 'layer9' is not a node.*did you mean 'layer4'"):
        create_model("resnet18", features=["layer9"])
    with pytest.raises(ConfigError, match=r"features: model 'cnn' has no named nodes to return"):
        build_model({"name": "cnn"}, features=["encoder"])
    with pytest.raises(ConfigError, match=r"model.features: names no node"):
        create_model("resnet18", ["features=[]"])


class TwoScaleClassifier(nn.Module):
    """The README's example: a modelforge backbone inside a model of one's own, trained with a plain torch loop."""

    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.backbone = create_model("resnet18", features=["layer3", "layer4"], seed=0)
        self.heads = nn.ModuleList(nn.Linear(info["num_chs"], n_classes) for info in self.backbone.feature_info)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        maps = self.backbone(x)  # {"layer3": [B, 256, 7, 7], "layer4": [B, 512, 4, 4]}
        return sum(head(m.mean((2, 3))) for head, m in zip(self.heads, maps.values()))


def test_a_backbone_trains_inside_a_users_module_with_a_plain_loop() -> None:
    torch.manual_seed(0)
    model = TwoScaleClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))
    losses = []
    for _ in range(3):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert all(p.grad is not None for p in model.backbone.parameters())  # the backbone is trained too
