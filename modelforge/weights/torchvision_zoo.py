"""torchvision's ImageNet weights for the zoo's models written after torchvision, as data: no torchvision import.

Copied from torchvision 0.28's weight enums (``torchvision.models.ResNet50_Weights`` and the others): each file's
URL (whose name ends in the first digits of its SHA-256, which ``torch.hub`` checks as torchvision does), the
preprocessing it was trained with (``weights.transforms()``: resize, crop, interpolation; ImageNet's mean and std
for all) and its ImageNet-1K top-1 accuracy. ``tests/weights/test_torchvision_zoo.py`` compares this table with
the enums where torchvision is installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelforge.errors import ConfigError, UnknownNameError, closest_names

PREFIX = "torchvision:"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BASE_URL = "https://download.pytorch.org/models/"


@dataclass(frozen=True)
class TorchvisionWeights:
    """One member of a torchvision weight enum (``ResNet50_Weights.IMAGENET1K_V2``)."""

    model: str  # the zoo's model and torchvision's builder: resnet50
    name: str  # the enum member: IMAGENET1K_V2
    enum: str  # the enum: ResNet50_Weights
    file: str  # under BASE_URL; its name's last part is the hash prefix torch.hub checks
    crop_size: int
    resize_size: int
    interpolation: str  # bilinear or bicubic
    acc1: float  # ImageNet-1K top-1, torchvision's figure
    n_params: int

    @property
    def url(self) -> str:
        return BASE_URL + self.file

    @property
    def label(self) -> str:
        return f"{PREFIX}{self.model}.{self.name}"

    def preprocessing(self) -> str:
        return (f"images resized to {self.resize_size} ({self.interpolation}), center-cropped to {self.crop_size}, "
                "ImageNet's mean and std")


def _weights(model: str, enum: str, *rows: tuple) -> dict[str, TorchvisionWeights]:
    return {row[0]: TorchvisionWeights(model, row[0], enum, *row[1:]) for row in rows}


# model: {enum member: weights}; the first member is the enum's DEFAULT.
TORCHVISION_WEIGHTS: dict[str, dict[str, TorchvisionWeights]] = {
    "resnet18": _weights("resnet18", "ResNet18_Weights",
                         ("IMAGENET1K_V1", "resnet18-f37072fd.pth", 224, 256, "bilinear", 69.758, 11_689_512)),
    "resnet34": _weights("resnet34", "ResNet34_Weights",
                         ("IMAGENET1K_V1", "resnet34-b627a593.pth", 224, 256, "bilinear", 73.314, 21_797_672)),
    "resnet50": _weights("resnet50", "ResNet50_Weights",
                         ("IMAGENET1K_V2", "resnet50-11ad3fa6.pth", 224, 232, "bilinear", 80.858, 25_557_032),
                         ("IMAGENET1K_V1", "resnet50-0676ba61.pth", 224, 256, "bilinear", 76.13, 25_557_032)),
    "mobilenet_v3_small": _weights(
        "mobilenet_v3_small", "MobileNet_V3_Small_Weights",
        ("IMAGENET1K_V1", "mobilenet_v3_small-047dcff4.pth", 224, 256, "bilinear", 67.668, 2_542_856)),
    "efficientnet_b0": _weights(
        "efficientnet_b0", "EfficientNet_B0_Weights",
        ("IMAGENET1K_V1", "efficientnet_b0_rwightman-7f5810bc.pth", 224, 256, "bicubic", 77.692, 5_288_548)),
    "convnext_tiny": _weights("convnext_tiny", "ConvNeXt_Tiny_Weights",
                              ("IMAGENET1K_V1", "convnext_tiny-983f1562.pth", 224, 236, "bilinear", 82.52, 28_589_128)),
    "vit_b_16": _weights("vit_b_16", "ViT_B_16_Weights",
                         ("IMAGENET1K_V1", "vit_b_16-c867db91.pth", 224, 256, "bilinear", 81.072, 86_567_656),
                         ("IMAGENET1K_SWAG_E2E_V1", "vit_b_16_swag-9ac1b537.pth", 384, 384, "bicubic", 85.304,
                          86_859_496),
                         ("IMAGENET1K_SWAG_LINEAR_V1", "vit_b_16_lc_swag-4e70ced5.pth", 224, 224, "bicubic", 81.886,
                          86_567_656)),
}


def is_torchvision_source(source: object) -> bool:
    return isinstance(source, str) and source.startswith(PREFIX)


def near_prefix(source: str) -> str | None:
    """``torchvison:resnet50`` -> ``torchvision:resnet50``: a misspelt prefix, for "did you mean"."""
    head, sep, rest = source.partition(":")
    if sep and len(head) > 3 and closest_names(head, [PREFIX[:-1]]):
        return PREFIX + rest
    return None


def torchvision_weights(source: str, key: str = "init.from") -> TorchvisionWeights:
    """The weights ``torchvision:MODEL`` (the enum's DEFAULT) or ``torchvision:MODEL.NAME`` names.

    Raises:
        UnknownNameError: a model without torchvision weights here, or a name its enum lacks (with the closest).
    """
    spec = source.removeprefix(PREFIX)
    model, _, name = spec.partition(".")
    if model not in TORCHVISION_WEIGHTS:
        raise UnknownNameError("torchvision model", model, TORCHVISION_WEIGHTS, path=key)
    members = TORCHVISION_WEIGHTS[model]
    if not name or name == "DEFAULT":
        return next(iter(members.values()))
    if name not in members:
        enum = next(iter(members.values())).enum
        raise ConfigError(key, f"{enum} has no weights {name!r}", allowed=["DEFAULT", *members],
                          suggestions=closest_names(name, members), hint=f"init.from={PREFIX}{model}.{next(iter(members))}")
    return members[name]


def preprocessing_note(weights: TorchvisionWeights, data: Mapping[str, Any] | None) -> str:
    """What torchvision trained ``weights`` on, and the options of a ``data=image_folder`` config that differ."""
    note = f"{weights.label} was trained on {weights.preprocessing()}"
    data = data or {}
    if data.get("name") != "image_folder":
        return note
    theirs = {"image_size": weights.crop_size, "resize_size": weights.resize_size,
              "interpolation": weights.interpolation}
    differ = [f"data.{k}={data[k]} (theirs: {v})" for k, v in theirs.items() if k in data and data[k] != v]
    return note + ("; this run's " + ", ".join(differ) if differ else ": as this run's data")
