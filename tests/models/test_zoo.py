"""The zoo models (conf/model/*.yaml) against independent plain-torch references.

Each reference below is written from the architecture's published definition (torchvision's
BasicBlock/ResNet, ultralytics' YOLOv8 Conv/Bottleneck/C2f/Classify and yolov8-cls.yaml, LeNet-5,
a pre-norm ViT, a row-reading LSTM) with torch.nn modules only; nothing from modelforge's layers or
blocks. For each model: the same parameter count, and the same output once the reference's
weights (parameters and buffers, randomized) are copied into ours. The references register their
submodules in forward order, the order our YAML nodes run, so the two state_dicts line up pairwise.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from modelforge import create_model
from tests.helpers.parity import n_params, randomize_norms

# --------------------------------------------------------------------------------------------
# helpers


def copy_weights(reference: nn.Module, ours: nn.Module) -> None:
    """Load the reference's state_dict into ours, pairing entries by position (params and buffers)."""
    ref_items = list(reference.state_dict().items())
    our_items = list(ours.state_dict().items())
    if len(ref_items) != len(our_items):
        n = min(len(ref_items), len(our_items))
        first_diff = next((i for i in range(n) if ref_items[i][1].shape != our_items[i][1].shape), n)
        near = [f"  [{i}] reference {ref_items[i][0]} {tuple(ref_items[i][1].shape)}"
                f" | ours {our_items[i][0]} {tuple(our_items[i][1].shape)}"
                for i in range(max(0, first_diff - 2), min(n, first_diff + 3))]
        extra = ([f"  reference only: {k}" for k, _ in ref_items[n:n + 5]]
                 + [f"  ours only: {k}" for k, _ in our_items[n:n + 5]])
        raise AssertionError(f"state_dict lengths differ: reference {len(ref_items)}, ours {len(our_items)};"
                             f" first shape mismatch at index {first_diff}:\n" + "\n".join(near + extra))
    loaded = {}
    for i, ((ref_key, ref_value), (our_key, our_value)) in enumerate(zip(ref_items, our_items)):
        assert ref_value.shape == our_value.shape, (
            f"state_dict entry {i}: reference {ref_key} {tuple(ref_value.shape)}"
            f" != ours {our_key} {tuple(our_value.shape)}")
        assert ref_value.dtype == our_value.dtype, (
            f"state_dict entry {i}: reference {ref_key} {ref_value.dtype} != ours {our_key} {our_value.dtype}")
        loaded[our_key] = ref_value.detach().clone()
    ours.load_state_dict(loaded, strict=True)


def assert_same_output(reference: nn.Module, ours: nn.Module, x: Tensor) -> None:
    randomize_norms(reference, tuple(x.shape))
    copy_weights(reference, ours)
    reference.eval()
    ours.eval()
    with torch.no_grad():
        expected = reference(x)
        got = ours(x)
    assert expected.shape == got.shape, f"output shapes differ: reference {expected.shape}, ours {got.shape}"
    if x.shape[0] > 1:  # the comparison means something only if the output depends on the input
        assert (expected[0] - expected[1]).abs().max() > 1e-4
    scale = expected.abs().max().item()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5 * max(1.0, scale))


def test_copy_weights_names_both_keys_on_a_mismatch() -> None:
    with pytest.raises(AssertionError, match=r"reference 2\.weight \(4, 8\) != ours 2\.weight \(3, 8\)"):
        copy_weights(nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4)),
                     nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3)))
    with pytest.raises(AssertionError, match=r"(?s)lengths differ: reference 4, ours 2.*reference only: 2\.weight"):
        copy_weights(nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4)), nn.Sequential(nn.Linear(2, 8)))


# --------------------------------------------------------------------------------------------
# ResNet (torchvision BasicBlock/ResNet, 28x28 stem: 3x3 conv without bias, BN, ReLU, no max-pool)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: list[int], in_channels: int = 1, n_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        stages, c_in = [], 64
        for i, (c_out, blocks) in enumerate(zip([64, 128, 256, 512], layers)):
            stride = 1 if i == 0 else 2
            stage = [BasicBlock(c_in, c_out, stride)] + [BasicBlock(c_out, c_out, 1) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


RESNET_LAYERS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3]}


@pytest.mark.parametrize(("name", "params"), [("resnet18", 11_172_810), ("resnet34", 21_280_970)])
def test_resnet_matches_reference(name: str, params: int) -> None:
    torch.manual_seed(0)
    reference = ResNet(RESNET_LAYERS[name])
    ours = create_model(name)
    assert n_params(ours) == n_params(reference) == params
    assert_same_output(reference, ours, torch.randn(2, 1, 28, 28))


def test_resnet18_projection_shortcut_only_where_shape_changes() -> None:
    paths = {name for name, _ in create_model("resnet18").named_modules()}
    assert {"nodes.layer2.0.conv1.conv", "nodes.layer2.0.conv2.conv", "nodes.layer2.0.shortcut.conv",
            "nodes.layer2.0.shortcut.norm", "nodes.layer3.0.shortcut.conv", "nodes.layer4.0.shortcut.conv"} <= paths
    for absent in ["nodes.layer1.0.shortcut", "nodes.layer1.1.shortcut", "nodes.layer2.1.shortcut",
                   "nodes.layer3.1.shortcut", "nodes.layer4.1.shortcut"]:
        assert absent not in paths


# --------------------------------------------------------------------------------------------
# YOLOv8-cls (ultralytics nn/modules Conv, Bottleneck, C2f, Classify; models/v8/yolov8-cls.yaml)

YOLO_SCALES = {  # [depth, width, max_channels]
    "n": (0.33, 0.25, 1024),
    "s": (0.33, 0.50, 1024),
    "m": (0.67, 0.75, 1024),
    "l": (1.00, 1.00, 1024),
    "x": (1.00, 1.25, 1024),
}
# yolov8-cls.yaml's backbone: [repeats, module, [out_channels, ...]]
YOLO_BACKBONE = [(1, "Conv", 64), (1, "Conv", 128), (3, "C2f", 128), (1, "Conv", 256), (6, "C2f", 256),
                 (1, "Conv", 512), (6, "C2f", 512), (1, "Conv", 1024), (3, "C2f", 1024)]


class Conv(nn.Module):
    """ultralytics Conv: Conv2d(k, s, padding k//2, no bias) -> BatchNorm2d -> SiLU."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1: int, c2: int, shortcut: bool = True, e: float = 0.5) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 3, 1)
        self.cv2 = Conv(c_, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x: Tensor) -> Tensor:
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C2f(nn.Module):
    # ultralytics registers cv1, cv2, m; here m comes before cv2, the order they run (and our YAML's)
    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False, e: float = 0.5) -> None:
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, e=1.0) for _ in range(n))
        self.cv2 = Conv((2 + n) * self.c, c2, 1)

    def forward(self, x: Tensor) -> Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class Classify(nn.Module):
    """ultralytics Classify, returning logits (ultralytics applies softmax in eval mode)."""

    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        c_ = 1280  # efficientnet_b0 size; not scaled
        self.conv = Conv(c1, c_, 1, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(p=0.0)
        self.linear = nn.Linear(c_, c2)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.drop(self.pool(self.conv(x)).flatten(1)))


def yolov8_cls(scale: str, in_channels: int, n_classes: int) -> nn.Sequential:
    """ultralytics parse_model's scale rules applied to yolov8-cls.yaml."""
    depth, width, max_channels = YOLO_SCALES[scale]
    layers, c1 = [], in_channels
    for n, kind, c2 in YOLO_BACKBONE:
        n = max(round(n * depth), 1) if n > 1 else n
        c2 = math.ceil(min(c2, max_channels) * width / 8) * 8
        layers.append(Conv(c1, c2, 3, 2) if kind == "Conv" else C2f(c1, c2, n, shortcut=True))
        c1 = c2
    layers.append(Classify(c1, n_classes))
    return nn.Sequential(*layers)


def _yolo(scale: str, in_channels: int, n_classes: int, size: int) -> nn.Module:
    return create_model("yolov8_cls", [f"scale={scale}", f"in_channels={in_channels}",
                                       f"n_classes={n_classes}", f"input_size=[{size},{size}]"])


@pytest.mark.parametrize(("scale", "params"), [("n", 2_719_288), ("s", 6_361_736), ("m", 17_053_336),
                                               ("l", 37_480_744), ("x", 57_422_840)])
def test_yolov8_cls_param_count(scale: str, params: int) -> None:
    torch.manual_seed(0)
    assert n_params(_yolo(scale, 3, 1000, 224)) == params
    assert n_params(yolov8_cls(scale, 3, 1000)) == params


@pytest.mark.parametrize(("scale", "in_channels", "n_classes", "size", "batch"), [
    ("n", 3, 1000, 224, 2),
    ("n", 1, 10, 28, 2),    # the YAML's defaults: MNIST-sized
    ("s", 3, 1000, 64, 2),
    ("m", 3, 100, 64, 2),   # depth 0.67: 2, 4, 4, 2 bottlenecks
])
def test_yolov8_cls_matches_reference(scale: str, in_channels: int, n_classes: int, size: int, batch: int) -> None:
    torch.manual_seed(0)
    reference = yolov8_cls(scale, in_channels, n_classes)
    ours = _yolo(scale, in_channels, n_classes, size)
    assert n_params(ours) == n_params(reference)
    assert_same_output(reference, ours, torch.randn(batch, in_channels, size, size))


def test_yolov8_cls_default_config_is_scale_n_for_mnist() -> None:
    torch.manual_seed(0)
    ours = create_model("yolov8_cls")
    assert n_params(ours) == n_params(yolov8_cls("n", 1, 10))
    assert ours(torch.randn(2, 1, 28, 28)).shape == (2, 10)


# --------------------------------------------------------------------------------------------
# LeNet-5, row-LSTM, ViT-tiny


class LeNet5(nn.Module):
    def __init__(self, in_channels: int = 1, n_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2),
            nn.Conv2d(6, 16, 5), nn.Tanh(), nn.AvgPool2d(2))
        self.classifier = nn.Sequential(
            nn.Linear(16 * 5 * 5, 120), nn.Tanh(), nn.Linear(120, 84), nn.Tanh(), nn.Linear(84, n_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class RowLSTM(nn.Module):
    """Reads the image's rows as a sequence; classifies from the last step's output."""

    def __init__(self, width: int = 28, hidden: int = 128, n_classes: int = 10) -> None:
        super().__init__()
        self.lstm = nn.LSTM(width, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.lstm(x.flatten(1, 2))  # [B, 1, 28, 28] -> [B, 28 steps, 28]
        return self.head(out[:, -1])


class Token(nn.Module):
    """Holds one learned tensor, so that it sits in the state_dict where its step runs."""

    def __init__(self, *shape: int) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.randn(*shape) * 0.1)


class EncoderLayer(nn.Module):
    """Pre-norm transformer encoder layer: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * mlp_ratio), nn.GELU(), nn.Linear(dim * mlp_ratio, dim))

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, in_channels: int = 1, size: int = 28, patch: int = 4, dim: int = 64, depth: int = 4,
                 heads: int = 4, mlp_ratio: int = 2, n_classes: int = 10) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(in_channels, dim, patch, patch)
        self.cls_token = Token(1, 1, dim)
        self.pos_embed = Token(1, (size // patch) ** 2 + 1, dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, mlp_ratio) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)              # [B, 49, dim]
        x = torch.cat([self.cls_token.value.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embed.value                                    # [B, 50, dim]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)[:, 0])


SMALL = {"lenet5": (LeNet5, 61_706), "lstm": (RowLSTM, 82_186), "vit_tiny": (ViT, 139_018)}


@pytest.mark.parametrize("name", ["lenet5", "lstm", "vit_tiny"])
def test_small_model_param_count(name: str) -> None:
    torch.manual_seed(0)
    reference_cls, params = SMALL[name]
    ours = n_params(create_model(name))
    assert ours == n_params(reference_cls()) == params


def test_vit_tiny_shapes() -> None:
    ours = create_model("vit_tiny")
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes["nodes.cls.token"] == (1, 1, 64)
    assert shapes["nodes.pos.embedding"] == (1, 50, 64)
    assert shapes["nodes.encoder.3.attn.in_proj_weight"] == (192, 64)
    assert "nodes.encoder.4.norm1.weight" not in shapes


@pytest.mark.parametrize("name", ["lenet5", "lstm", "vit_tiny"])
def test_small_model_matches_reference(name: str) -> None:
    torch.manual_seed(0)
    reference = SMALL[name][0]()
    ours = create_model(name)
    assert_same_output(reference, ours, torch.randn(3, 1, 28, 28))
