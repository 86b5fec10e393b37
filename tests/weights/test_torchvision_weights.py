"""torchvision's weights on the zoo (issue 41): its state_dict files load into the models written after it, paired by
structure, and compute what torchvision computes; ``init.from=torchvision:NAME`` fetches as torchvision does, and says
where to put the file when it cannot. torchvision itself is found as tests/helpers/parity.py finds it."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from modelforge import CheckpointError, ConfigError, build_model, create_model
from modelforge.train.transfer import apply_transfer
from modelforge.weights.hub import cache_path, fetch
from modelforge.weights.torchvision_zoo import TORCHVISION_WEIGHTS, TorchvisionWeights, torchvision_weights
from tests.data.image_folder_helpers import write_image_folder
from tests.helpers.parity import randomize, torchvision_models

tv_models = torchvision_models()

# The zoo's models written after torchvision and the image side they are compared at (convolutions take any size:
# 64 is quick; ViT's position embedding is one per 16x16 patch of a 224x224 image).
SIDES = {"resnet18": 64, "resnet34": 64, "resnet50": 64, "mobilenet_v3_small": 64, "efficientnet_b0": 64,
         "convnext_tiny": 64, "vit_b_16": 224}
QUICK = ("resnet18",)  # in the default run; the others under -m slow


def test_the_table_is_torchvisions_enums() -> None:
    assert set(TORCHVISION_WEIGHTS) == set(SIDES)
    for model, members in TORCHVISION_WEIGHTS.items():
        enum = tv_models.get_model_weights(model)
        assert list(members) == [enum.DEFAULT.name, *(w.name for w in enum if w is not enum.DEFAULT)]
        for name, ours in members.items():
            theirs, transforms = enum[name], enum[name].transforms()
            assert (ours.url, ours.enum, ours.n_params) == (theirs.url, enum.__name__, theirs.meta["num_params"])
            assert (ours.crop_size, ours.resize_size, ours.interpolation) == (
                transforms.crop_size[0], transforms.resize_size[0], transforms.interpolation.value)
            assert ours.acc1 == theirs.meta["_metrics"]["ImageNet-1K"]["acc@1"]
            assert (tuple(transforms.mean), tuple(transforms.std)) == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _torchvision_file("resnet18", tmp_path_factory.mktemp("resnet18"))[1]


def _torchvision_file(name: str, folder: Path) -> tuple[torch.nn.Module, Path, torch.Tensor]:
    """torchvision's model (random init, every constant part redrawn), its state_dict saved as torchvision saves its
    weights, and an input."""
    torch.manual_seed(0)
    reference = getattr(tv_models, name)(weights=None)
    x = torch.randn(2, 3, SIDES[name], SIDES[name])
    randomize(reference, x)
    path = folder / f"{name}-random.pth"
    torch.save(reference.state_dict(), path)
    return reference.eval(), path, x


def _check_parity(name: str, tmp_path: Path) -> None:
    reference, path, x = _torchvision_file(name, tmp_path)
    side = SIDES[name]
    model = create_model(name, ["in_channels=3", "n_classes=1000", f"input_size=[{side},{side}]"])
    transfer = apply_transfer({"init": {"from": str(path), "strict": True}}, model)
    total = len(model.state_dict())
    assert transfer.lines(model) == [f"init.from: loaded {total} of the model's {total} tensors from {path} (paired "
                                     "by structure: the file's names are not the model's)"]
    with torch.no_grad():
        expected, got = reference(x), model.eval()(x)
    assert (expected[0] - expected[1]).abs().max() > 1e-3
    assert (got - expected).abs().max().item() == 0.0


@pytest.mark.parametrize("name", QUICK)
def test_torchvision_files_load_and_compute_what_torchvision_computes(name: str, tmp_path: Path) -> None:
    _check_parity(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SIDES if n not in QUICK])
def test_torchvision_files_load_and_compute_what_torchvision_computes_big(name: str, tmp_path: Path) -> None:
    _check_parity(name, tmp_path)  # resnet50: 320 of 320 tensors; vit_b_16: 152; convnext_tiny: 182


def test_a_head_of_other_size_is_left_at_init_for_fine_tuning(resnet18_file: Path) -> None:
    path = resnet18_file
    model = create_model("resnet18", ["in_channels=3", "n_classes=10", "input_size=[64,64]"])
    head = model.nodes.fc.weight.detach().clone()
    transfer = apply_transfer({"init": {"from": str(path)}}, model)
    assert transfer.lines(model)[0].startswith(f"init.from: loaded 120 of the model's 122 tensors from {path}")
    assert transfer.lines(model)[1] == ("init.from: 2 of a new head (other outputs than the file's), left as initialized"
                                        " to be trained: nodes.fc.weight [1000, 512] vs [10, 512], nodes.fc.bias "
                                        "[1000] vs [10]")
    assert torch.equal(model.nodes.fc.weight, head)
    assert torch.equal(model.nodes.stem.conv.weight, torch.load(path, weights_only=True)["conv1.weight"])
    assert transfer.record(model)["init"]["paired"] == "structure"


def test_a_model_of_another_shape_is_one_error_naming_both_sides(resnet18_file: Path) -> None:
    path = resnet18_file
    with pytest.raises(CheckpointError, match=r"^init.from: no tensor of .*resnet18-random.pth fits this model: .*\n"
                                              r"  no name is the model's, nor does it pair by structure: .* the first "
                                              r"conv1.weight \[64, 3, 7, 7\]; .* the first nodes.stem.conv.weight "
                                              r"\[64, 1, 3, 3\]\n  hint: build the model the weights were made for"):
        apply_transfer({"init": {"from": str(path)}}, create_model("resnet18"))  # MNIST's: 1 channel, 3x3 stem


def test_torchvision_names_are_checked_with_did_you_mean() -> None:
    assert torchvision_weights("torchvision:resnet50").name == "IMAGENET1K_V2"  # the enum's DEFAULT
    assert torchvision_weights("torchvision:resnet50.IMAGENET1K_V1").file == "resnet50-0676ba61.pth"
    model = build_model({"name": "cnn", "enc_sizes": [8]})  # refused before any tensor is read
    with pytest.raises(ConfigError, match=r"^init.from: unknown torchvision model 'resnet5'\n  did you mean 'resnet50'"):
        apply_transfer({"init": {"from": "torchvision:resnet5"}}, model)
    with pytest.raises(ConfigError, match=r"^init.from: ResNet50_Weights has no weights 'IMAGENET1K_V3'\n  did you mean "
                                          r"'IMAGENET1K_V2'\?\n  allowed: DEFAULT, IMAGENET1K_V2, IMAGENET1K_V1"):
        apply_transfer({"init": {"from": "torchvision:resnet50.IMAGENET1K_V3"}}, model)
    with pytest.raises(CheckpointError, match=r"^init.from: no checkpoint file at .*torchvison:resnet18\n  did you mean "
                                              r"'torchvision:resnet18'\?$"):
        apply_transfer({"init": {"from": "torchvison:resnet18"}}, model)


def _named_by_hash(folder: Path, content: bytes, model: str = "resnet18") -> TorchvisionWeights:
    """A table entry for a file of ``content`` named as torchvision names its files: by its SHA-256's first digits."""
    digest = hashlib.sha256(content).hexdigest()[:8]
    entry = TORCHVISION_WEIGHTS[model]["IMAGENET1K_V1"]
    return TorchvisionWeights(model, "TEST", entry.enum, f"{model}-{digest}.pth", 224, 256, "bilinear", 0.0, 0)


def test_a_file_in_torch_hubs_cache_is_used_and_checked_against_its_hash(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    content = b"weights"
    weights = _named_by_hash(tmp_path, content)
    path = cache_path(weights)
    assert path == tmp_path / "torch" / "hub" / "checkpoints" / weights.file
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert fetch(weights) == path  # found: no download
    path.write_bytes(b"other weights")
    with pytest.raises(CheckpointError, match=rf"^init.from: {path} is not torchvision:resnet18.TEST: its SHA-256 "
                                              rf"begins [0-9a-f]{{8}}, the file's name says {weights.file[9:17]}"):
        fetch(weights)


@pytest.fixture
def no_network() -> Iterator[dict[str, str]]:
    """Environment for a process whose HTTPS goes through a proxy that refuses every connection, and whose
    torch.hub cache is empty: what a machine without network sees, on any machine."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        proxy = f"http://127.0.0.1:{sock.getsockname()[1]}"
        yield {"https_proxy": proxy, "HTTPS_PROXY": proxy, "no_proxy": "", "NO_PROXY": ""}
    finally:
        sock.close()


@pytest.mark.e2e
def test_without_network_torchvision_weights_are_one_line_naming_the_url_and_the_cache_path(
        cli, no_network: dict[str, str], tmp_path: Path) -> None:
    env = {**no_network, "TORCH_HOME": str(tmp_path / "torch")}
    write_image_folder(tmp_path / "images", n_classes=2)  # colour: a model the weights pair with, so it downloads
    result = cli("train", "model=resnet18", "init.from=torchvision:resnet18", f"hydra.run.dir={tmp_path / 'run'}",
                 "data=image_folder", f"data.root={tmp_path / 'images'}", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    expected = (f"error: init.from: cannot download torchvision:resnet18.IMAGENET1K_V1 from "
                f"https://download.pytorch.org/models/resnet18-f37072fd.pth (")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert lines[0].endswith(f"): put that file at {tmp_path}/torch/hub/checkpoints/resnet18-f37072fd.pth and run "
                             "again")
    assert not (tmp_path / "run").exists() and not list((tmp_path / "torch").rglob("*.pth*"))


def test_the_run_says_how_torchvisions_weights_were_trained_and_which_data_options_differ() -> None:
    from modelforge.weights.torchvision_zoo import preprocessing_note

    v2 = torchvision_weights("torchvision:resnet50")
    assert preprocessing_note(v2, {"name": "mnist"}) == (
        "torchvision:resnet50.IMAGENET1K_V2 was trained on images resized to 232 (bilinear), center-cropped to 224, "
        "ImageNet's mean and std")
    folder = {"name": "image_folder", "image_size": 224, "resize_size": 256, "interpolation": "bilinear"}
    assert preprocessing_note(v2, folder).endswith("; this run's data.resize_size=256 (theirs: 232)")
    assert preprocessing_note(torchvision_weights("torchvision:resnet18"), folder).endswith(": as this run's data")


def test_image_folders_default_to_the_preprocessing_of_torchvisions_default_weights() -> None:
    from modelforge.data.options import ImageFolderOptions

    options = ImageFolderOptions(root="X")
    for members in TORCHVISION_WEIGHTS.values():
        weights = next(iter(members.values()))
        assert weights.crop_size == options.image_size
    assert (options.resize_size, options.interpolation) == (256, "bilinear")  # resnet18/34, mobilenet, vit_b_16's
    assert (options.mean, options.std) == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
